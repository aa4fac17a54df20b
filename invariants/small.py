"""A call of few inputs that extends the previous call's chain, read as plain lists (Spec §3.12.1, §3.12.2).

Most calls of a speculative decoder feed one token a row (a draft step) and
append to the chain the model's previous call left
(:meth:`~batchspec.invariants.history.History._inputs`). Their new columns
are a few dozen integers; a tensor operation costs microseconds whatever its
size, a list operation a fraction of one. So, up to :data:`SMALL` inputs, the chain
elements of the inputs (rank, token, the hash of the chain before, the hash
up to and including) and the labels of the slots they write are computed
here, row by row, with the same wrap-around int64 arithmetic as the tensor
path (:meth:`~batchspec.invariants.slots.Hasher.chain_weights`: a chain's hash
is ``Σ (x_l + 1) R[l]`` modulo ``2**64``), and written into the checker's
columns in one copy each. The lists are kept on the call's
:class:`~batchspec.invariants.chains.Chains`: C1's position clause reads them
(:attr:`~batchspec.invariants.chains.Chains.at_rank`), the stream memo walks
them (:func:`~batchspec.invariants.stream.fed_inputs`), and the next call
continues from their last column (:func:`tail`).
"""

from __future__ import annotations

from array import array

import torch

from ._util import on
from .chains import Chains, Extended, link
from .columns import head
from .slots import BLIND, PADDING, WRITTEN

#: Up to this many inputs (rows times columns), a call that extends the previous call's chain is read as lists.
SMALL = 256
_MOD, _HALF = 1 << 64, 1 << 63


def wrap(x: int) -> int:
    """``x`` as an int64 wraps it (two's complement, modulo ``2**64``)."""
    return (x + _HALF) % _MOD - _HALF


def tail(before, t: int) -> tuple[list, list]:
    """``(ranks, nodes)``, per row, of column ``t - 1`` of ``before`` (a :class:`Chains`):
    from its lists when that is its last column, else read from its tensors."""
    if before.lists is not None and before.node.shape[1] == t:
        nodes, _befores, _tokens, ranks = before.lists
        n = before.call.input_ids.shape[1]
        return ranks[n - 1::n], nodes[n - 1::n]
    ranks, nodes = torch.stack([before.rank[:, t - 1], before.node[:, t - 1]]).tolist()
    return ranks, nodes


def extend(weights: list, ranks: list, nodes: list, ids: list, positions: list | None) -> tuple:
    """The chain elements of inputs ``ids`` ``[B][n]``, every one attended, after each row's
    last element (``ranks[i]``, ``nodes[i]``): ``(quad, labels, at_rank, columns)``.
    ``quad``: per input, row-major, its rank, token, the hash before and the hash after,
    flat (``[B, n, 4]``, :meth:`History._inputs`); ``labels``: per input, what its slot holds
    (token, position fed, the hash before, ``WRITTEN``; :meth:`Chains.written`), flat;
    ``at_rank``: every input is fed at the position equal to its rank (None when
    ``positions`` is not one per input); ``columns``: ``(nodes, befores, tokens, ranks)``,
    row-major (:func:`~batchspec.invariants.stream.fed_inputs`)."""
    quad, labels, at_rank = [], [], positions is not None
    after, before, tokens, rank = [], [], [], []
    for i, (r, h, row) in enumerate(zip(ranks, nodes, ids)):
        fed = positions[i] if positions is not None else row
        for x, p in zip(row, fed):
            r += 1
            g = wrap(h + (x + 1) * weights[r])
            quad += (r, x, h, g)
            labels += (x, p, h, WRITTEN)
            after.append(g)
            before.append(h)
            tokens.append(x)
            rank.append(r)
            at_rank = at_rank and p == r
            h = g
    return quad, labels, at_rank if positions is not None else None, (after, before, tokens, rank)


def fill(out: torch.Tensor, flat: list) -> torch.Tensor:
    """``out`` (int64 ``[B, n, 4]``: a :class:`~batchspec.invariants.columns.Columns` slot) written
    from ``flat``, its elements in order: one copy from an int64 buffer (building a tensor
    from a list reads each element as a Python object, several times slower)."""
    return out.copy_(torch.frombuffer(array("q", flat), dtype=torch.int64).view(out.shape))


def few(history, call, attended: torch.Tensor, before, t: int):
    """:meth:`~batchspec.invariants.history.History._inputs` for a call of at
    most :data:`SMALL` inputs, every one attended: the same :class:`Chains`, its new columns
    computed as lists (:func:`extend`) and written in one copy each. After a call whose context
    is not built yet (carried by rank), its labels are not built either (:class:`~.chains.Extended`):
    nothing reads them unless a violation is explained or a mask changes. None for a larger call."""
    ids, positions = call.input_ids, call.position_ids
    b, n = ids.shape
    if not 0 < b * n <= SMALL:
        return None
    ranks, nodes = tail(before, t)
    fed = positions.tolist() if tuple(positions.shape) == (b, n) and not positions.dtype.is_floating_point else None
    quad, labels, at_rank, columns = extend(history.hasher.weight_list(t + n), ranks, nodes, ids.tolist(), fed)
    cols = history.columns_of(call.model)
    whole, new = cols[0].reserve(before.elements(t), b, n, (4,), torch.int64, ids.device)
    fill(new, quad)
    chains = Chains(history.calls, call, attended, *whole.unbind(-1), history, checked=t,
                    _marks=history.marks(before, t), quad=whole, _every=True, extends=before.node,
                    at_rank=at_rank, lists=columns)
    if before.source is not None and fed is not None:  # its context is not built (carried by rank): nor this one's
        chains.source, chains.depth = Extended(before, t), link(before)
        chains._written = on(torch.frombuffer(array("q", labels), dtype=torch.int64).view(b, n, 4), ids.device)
        return chains
    chains._labels, new = cols[1].reserve(head(before.labels_in(cols[1]), t), b, n, (4,), torch.int64, ids.device)
    if fed is None:
        chains.written(out=new)
    else:
        chains._written = fill(new, labels)
    chains._context = chains._labels[:, :t]
    return chains


def few_changed(history, call, attended: torch.Tensor, before, t: int, c: int, context: torch.Tensor):
    """The :class:`Chains` of a call whose cached slots hold what its model's previous call
    left but whose mask changed from column ``c`` on (holes: a rejected draft masked out),
    when columns ``c ..`` number at most :data:`SMALL` over the batch, read as lists; and C1's
    first two clauses checked on them (Spec §3.12.2: every attended slot labelled for its rank
    after its prefix, every attended input fed at its rank, no masked input after the chain
    began, no masked slot that holds the target's own choice continuing the chain, the
    tensor path's ``_chain`` and ``diversions``). None when any of them fails, or needs a
    column before ``c``: the tensor path then reads the call and says what is wrong. None too
    for a call of no inputs, positions not one integer per input, or a previous call whose
    labels C1 re-read from the table (``_confirm``: its chain tensors were built from the
    carried labels).
    ``context``: the labels ``[B, T, 4]`` of the cached slots (the previous call's)."""
    ids, positions = call.input_ids, call.position_ids
    b, n = ids.shape
    m = t + n - c
    if not (n and b * m <= SMALL) or tuple(positions.shape) != (b, n) or positions.is_floating_point() \
            or before.confirmed:
        return None
    ranks, nodes = tail(before, c) if c else ([-1] * b, [0] * b)
    att, labels = attended[:, c:].tolist(), context[:, c:].tolist()
    weights, chosen, idl, fed = history.hasher.weight_list(t + n), history.chosen, ids.tolist(), positions.tolist()
    quad, written, every = [], [], True
    columns = ([], [], [], [])  # the inputs' nodes, befores, tokens, ranks (all attended: stream.fed_inputs)
    for i in range(b):
        r, h, row, holes = ranks[i], nodes[i], [], []
        for k in range(m):
            cached = k < t - c
            x, p, prefix, flag = labels[i][k] if cached else (idl[i][k - t + c], fed[i][k - t + c], None, WRITTEN)
            if att[i][k]:
                r += 1
                if p != r or (cached and not (flag <= BLIND and (prefix == h or flag == BLIND))):
                    return None
                g = wrap(h + (x + 1) * weights[r])
            else:
                if r >= 0 and not cached:
                    return None  # an input masked out after the chain began
                if r >= 0 and flag == WRITTEN:
                    holes.append((x, max(p, 0), prefix))
                g, every = h, every and cached
            row.append((r, x, h, g))
            if not cached:
                written += (x, p, h, WRITTEN if att[i][k] else PADDING)
                for column, value in zip(columns, (g, h, x, r)):
                    column.append(value)
            h = g
        for x, j, prefix in holes:  # the chain element at the hole's position, by its rank
            if ranks[i] >= j:
                return None  # before column c
            element = next((e for e in row if e[0] >= j), None)
            if element is not None and element[0] == j and element[2] == prefix and element[1] != x \
                    and x in chosen.get(prefix, {}):
                return None
        quad += [v for element in row for v in element]
    cols = history.columns_of(call.model)
    whole, new = cols[0].reserve(before.elements(c) if c else None, b, m, (4,), torch.int64, ids.device)
    fill(new, quad)
    chains = Chains(history.calls, call, attended, *whole.unbind(-1), history, checked=c, _context=context,
                    _marks=history.marks(before, c), quad=whole, _every=every, extends=before.node, at_rank=True,
                    lists=columns if every else None, clean=True)
    chains._labels, new = cols[1].reserve(head(before.labels_in(cols[1]), t), b, n, (4,), torch.int64, ids.device)
    chains._written = fill(new, written)
    chains._context = chains._labels[:, :t]
    return chains
