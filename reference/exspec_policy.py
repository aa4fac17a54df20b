"""Which window members form the next EXSPEC batch (Spec §8.2).

A policy is a plain function ``policy(window, batch_size) -> list[int]``:
``window`` lists the members as :class:`Candidate` s in admission order
(oldest first); the result is the indices of ``min(B, len(window))``
distinct members. Exactness never depends on the choice — any selection is
stacked or realigned correctly (Spec §8.3) — only the realignment cost and
how long requests wait do, so a policy can be swapped freely.

Cost model: members sit in the pool unpadded, so a batch whose longest
member has ``c_max`` tokens gives member ``i`` the padding ``p_i = c_max -
c_i``, which is also its cache shift ``δ_i`` (Spec §4.5). ``Σ p_i`` is what
the fallback realignment moves and what every forward call of the round
then attends over in vain; it is 0 exactly for a same-length group.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

#: Rounds a member may sit unchosen before a policy must take it (Spec §8.2): it
#: bounds the head-of-line blocking of a member far from the others in the
#: window; how long requests wait in the queue is up to the policy (see
#: ``batchspec.scheduler.Scheduler``). Why 16, as measured: docs/design.md, "The idle bound".
MAX_IDLE = 16


@dataclass(frozen=True)
class Candidate:
    """What a policy sees of one window member."""

    length: int  # c_i, committed tokens (prompt + generated)
    idle: int  # rounds since it was last in a batch (or entered the window)


Policy = Callable[[Sequence[Candidate], int], list[int]]


def padding(window: Sequence[Candidate], chosen: Sequence[int]) -> int:
    """``Σ p_i`` of the batch ``chosen`` forms: the total ``|δ_i|`` of its
    fallback realignment, 0 for a same-length group."""
    top = max(window[i].length for i in chosen)
    return sum(top - window[i].length for i in chosen)


def full_group_only(window: Sequence[Candidate], batch_size: int) -> list[int]:
    """The authors' rule (eBay/spec_dec, ``SequencePool.get_batch``): scan the
    window in order; the first length group to reach ``B`` members is the
    batch. If none does, the first ``B`` members of the window, realigned."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, member in enumerate(window):
        groups[member.length].append(i)
        if len(groups[member.length]) == batch_size:
            return groups[member.length]
    return list(range(min(batch_size, len(window))))


def _least_padding(window: Sequence[Candidate], n: int, must: int | None) -> list[int]:
    """``n`` members (``must`` among them when given) with the least ``Σ p_i``.

    For a fixed longest member the cheapest fill is the longest others not
    longer than it, so trying every member as the longest finds the optimum
    in ``O(W^2)``. Ties go to the members that waited longest, then to the
    oldest.
    """
    order = sorted(range(len(window)), key=lambda i: (-window[i].length, -window[i].idle, i))
    best, best_key = [], None
    for top, head in enumerate(order):
        if must is not None and window[must].length > window[head].length:
            break  # every later head is shorter still
        fill = [i for i in order[top:] if i != must][: n - (must is not None)]
        chosen = fill + ([must] if must is not None else [])
        if len(chosen) < n:
            break
        key = (padding(window, chosen), -sum(window[i].idle for i in chosen), sorted(chosen))
        if best_key is None or key < best_key:
            best, best_key = chosen, key
    return sorted(best)


def _starving(window: Sequence[Candidate], max_idle: int | None) -> int | None:
    """The most idle member (the oldest among equals) if it waited ``max_idle`` rounds or more."""
    if max_idle is None or not window:
        return None
    oldest = max(range(len(window)), key=lambda i: (window[i].idle, -i))
    return oldest if window[oldest].idle >= max_idle else None


def nearest_lengths(window: Sequence[Candidate], batch_size: int,
                    max_idle: int | None = MAX_IDLE) -> list[int]:
    """Least realignment now: of all choices of ``n = min(B, len(window))``
    members, one with the smallest ``Σ p_i`` — a full same-length group when
    there is one, else the largest group filled with the nearest shorter
    lengths. A member idle for ``max_idle`` rounds or more (the most idle
    one) must be in the batch.

    Myopic: serving the tightest cluster lets the others fall behind, so the
    window's lengths spread and later rounds pad more (see
    :func:`laggards_first`).
    """
    return _least_padding(window, min(batch_size, len(window)), _starving(window, max_idle))


def laggards_first(window: Sequence[Candidate], batch_size: int,
                   max_idle: int | None = MAX_IDLE) -> list[int]:
    """The default (Spec §8.2): keep the window's lengths together.

    1. A member idle for ``max_idle`` rounds or more (the most idle one) is
       taken, with the partners that pad it least.
    2. Else a same-length group of ``n = min(B, len(window))`` members, the
       shortest such length first: no realignment.
    3. Else the ``n`` shortest members. The laggards catch up, the window
       advances as one front, and same-length groups keep forming. This
       batch may pad more than :func:`nearest_lengths`' would; over a run
       the window's lengths stay close and the padding is far smaller
       (benchmarks/exspec_grouping.py).

    Ties go to the members that waited longest, then to the oldest.
    """
    n = min(batch_size, len(window))
    must = _starving(window, max_idle)
    if must is not None:
        return _least_padding(window, n, must)
    rank = sorted(range(len(window)), key=lambda i: (window[i].length, -window[i].idle, i))
    groups: dict[int, list[int]] = defaultdict(list)
    for i in rank:
        groups[window[i].length].append(i)
    full = [members for members in groups.values() if len(members) >= n]  # shortest length first
    return sorted(full[0][:n] if full else rank[:n])


#: The policies by name, for benchmarks and the online scheduler.
POLICIES: dict[str, Policy] = {"laggards": laggards_first, "nearest": nearest_lengths,
                               "authors": full_group_only}
