"""One forward call read as chains, and where its context labels come from (Spec §3.12.2).

:class:`Chains` is what :meth:`~batchspec.invariants.history.History.read`
makes of one :class:`~batchspec.invariants.observation.ForwardCall`: per
row, every attended slot and input as an element of one chain, with what
its label says and the hash of the chain before it. A call that appended to
the previous call's cache has its labels built at once, appended to the
previous call's (:class:`~batchspec.invariants.columns.Columns`); a call whose
rows attend what the previous call's rows attended, wherever the slots now
sit, has them built when first read, from a :data:`Source`: :class:`Moved`,
and for the calls read as lists after it :class:`Extended`, until
:func:`link` cuts the chain (:class:`Own`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ._util import like, on
from .observation import ForwardCall
from .columns import head
from .slots import PADDING, UNWRITTEN, WRITTEN

if TYPE_CHECKING:
    from .history import History


UNREAD = torch.tensor([-1, -1, -1, UNWRITTEN])  # the label of a slot not (yet) looked up
#: At most this many lazy contexts in a row: building one reads the one before, recursively, and
#: each keeps the call before alive. A cut costs a few views (:func:`link`), so the chain is kept short.
DEPTH = 8


@dataclass
class Chains:
    """One forward call, each row read as a chain (Spec §3.12.2). Tensors are
    ``[B, T + n]`` (the ``T`` cached slots, then the ``n`` inputs) unless noted."""

    number: int  # the call's number in the run, from 1
    call: ForwardCall
    attended: torch.Tensor  # bool: the mask attends the slot / input
    rank: torch.Tensor  # index in the row's chain of each attended element (cumsum - 1)
    token: torch.Tensor  # cached slots: the label's token (-1 unwritten); inputs: the ids fed
    before: torch.Tensor  # hash of the row's chain before this element (its attended predecessors)
    node: torch.Tensor  # hash of the row's chain up to and including this element
    history: "History"  # to look up what an unattended slot holds, when a violation is explained
    #: the first ``checked`` cached slots are the previous call's chain, checked then (0: none)
    checked: int = 0
    #: [B, T + n] every slot's content hash, set once the call's writes are labelled
    hashes: torch.Tensor | None = None
    _context: torch.Tensor | None = None  # [B, T, 4], or built from ``source`` when first read
    #: where the context labels come from when first read (None once built)
    source: Source | None = None
    _labels: torch.Tensor | None = None
    #: the window ``W`` of the layers read (Spec §3.12.2's window rule), 0 for full attention:
    #: ranks are then positions, not indices into the call's columns
    window: int = 0
    _rejected: list | None = None  # [(row, slot)] attended slots on a rejected stream (stream.Stream.attended)
    _marked: int = 0  # how many nodes had been rejected when ``_rejected`` was computed
    #: ``(pairs, c, count, fed)``: the ``_rejected`` pairs of the previous call whose chain holds
    #: this one's first ``c`` cached slots, as of ``count`` rejected nodes, and the nodes it fed
    _marks: tuple | None = None
    _fed: list | None = None  # the nodes of the call's attended inputs (stream.fed_inputs), once read
    #: calls since the last one whose context labels are not read from another call's: each
    #: lazy context reads the previous call's, so :func:`link` cuts the chain every :data:`DEPTH` calls
    depth: int = 0
    _choice: torch.Tensor | None = None  # [B, kept] the logits' argmax, once read
    _written: torch.Tensor | None = None  # [B, n, 4] the labels of the slots the call wrote, once built
    #: [B, T + n, 4] ``rank``, ``token``, ``before`` and ``node`` are views of, where they were
    #: appended as one (History._inputs), so that the next call appends to it in place
    quad: torch.Tensor | None = None
    _every: bool | None = None  # every row attends every input, once read
    #: until the call is logged: the previous call's ``node`` when this call's first ``T``
    #: columns are that call's, attended alike (History._inputs): nothing to compare there
    extends: torch.Tensor | None = None
    #: until the call is logged: ``(node, rows)`` of the previous call whose chains this one
    #: continues by rank (History._moved), each row attending a run of cached slots ending at ``T - 1``
    moved_from: tuple | None = None
    #: a call read as lists: every input is fed at the position equal to its rank (C1's position clause)
    at_rank: bool | None = None
    #: a call read as lists: ``(nodes, befores, tokens, ranks)`` of its inputs, row-major (stream.fed_inputs)
    lists: tuple | None = None
    #: C1's first two clauses hold, checked as lists (.small.few_changed): nothing left to check there
    clean: bool = False
    #: C1 re-read some of its context labels from the table (correctness._confirm)
    confirmed: bool = False

    def __post_init__(self):
        # the History, held weakly: it holds its carried Chains, and a strong reference back
        # would make a cycle that keeps a finished watch's memory until a full garbage collection
        if type(self.history) not in weakref.ProxyTypes:
            self.history = weakref.proxy(self.history)

    @property
    def every(self) -> bool:
        """Every row attends every input (read once: the check, the labels and the memo ask)."""
        if self._every is None:
            self._every = bool(self.attended[:, self.cached:].all())
        return self._every

    @property
    def cached(self) -> int:
        """``T``: slots the cache held before the call."""
        return self.call.cache_length

    @property
    def context(self) -> torch.Tensor:
        """``[B, T, 4]`` the labels of the cached slots: token, position, prefix hash, flag."""
        if self._context is None:
            self._context = self.source.labels()
            self.source, self.depth = None, 0  # built: the previous call's Chains need not live on
        return self._context

    @property
    def choice(self) -> torch.Tensor:
        """``[B, kept]`` the call's greedy choices, ``logits.argmax(-1)`` (computed once:
        the target's choices and the stream memo both read them)."""
        if self._choice is None:
            self._choice = on(self.call.logits.argmax(-1), self.token.device)
        return self._choice

    def choices(self) -> tuple[list, list] | None:
        """``(nodes, choices)`` as lists, row-major: after every attended input the logits
        cover (the last ``kept``, for a call that trims its logits), its node and the
        call's greedy choice there. None when the logits cover no input or more than
        the call fed."""
        t, n, kept = self.cached, self.call.input_ids.shape[1], self.call.logits.shape[1]
        if kept == 0 or kept > n:
            return None
        if self.every:  # no mask to apply; every input's node read already when the inputs were listed
            nodes = self._fed if kept == n and self._fed is not None else self.node[:, t + n - kept:].flatten().tolist()
            return nodes, self.choice.flatten().tolist()
        fed = self.attended[:, t + n - kept:]
        return self.node[:, t + n - kept:][fed].tolist(), self.choice[fed].tolist()

    def written(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, n, 4]`` int64, the labels of the slots the call wrote: what it fed, where, after
        what (built once: the call's labels and the label table both read them); built into
        ``out`` when given (a slot of :class:`~batchspec.invariants.columns.Columns`)."""
        if self._written is None:
            t, call = self.cached, self.call
            ids = like(call.input_ids, self.before)
            flag = torch.full_like(ids, WRITTEN) if self.every else \
                PADDING - self.attended[:, t:].long() * (PADDING - WRITTEN)
            self._written = torch.stack([ids, like(call.position_ids, ids), self.before[:, t:], flag], -1, out=out)
        elif out is not None:
            self._written = out.copy_(self._written)
        return self._written

    def elements(self, upto: int) -> torch.Tensor:
        """``[B, upto, 4]``: ``rank``, ``token``, ``before`` and ``node`` of the first ``upto`` columns side by
        side (a view of ``quad`` when the call has one: the next call appends to it in place)."""
        if self.quad is not None:
            return self.quad if self.quad.shape[1] == upto else self.quad[:, :upto]
        return torch.stack([self.rank[:, :upto], self.token[:, :upto], self.before[:, :upto], self.node[:, :upto]], -1)

    def labels_in(self, columns) -> torch.Tensor:
        """:meth:`labels`, built into ``columns`` (a :class:`~batchspec.invariants.columns.Columns`) when
        not built yet, so that the next call's labels append to them in place."""
        if self._labels is None:
            self._labels = columns.append(self.context, self.written())
        return self._labels

    def labels(self) -> torch.Tensor:
        """``[B, T + n, 4]`` the labels of every slot after the call (built when first needed)."""
        if self._labels is None:
            self._labels = torch.cat([self.context, self.written()], 1)
        return self._labels

    @property
    def position(self) -> torch.Tensor:
        """Cached slots: the label's position; inputs: the positions fed."""
        return torch.cat([self.context[..., 1], self.call.position_ids.to(self.token)], 1)

    @property
    def flag(self) -> torch.Tensor:
        """Cached slots: the label's flag (``slots.WRITTEN``, ...); inputs: ``WRITTEN``."""
        return torch.cat([self.context[..., 3], torch.full_like(self.call.input_ids, WRITTEN).to(self.token)], 1)

    def stream(self, row: int, upto: int) -> list[int]:
        """The tokens of ``row``'s chain before element ``upto`` (for messages)."""
        keep = self.attended[row, :upto]
        return self.token[row, :upto][keep].tolist()


@dataclass(frozen=True)
class Moved:
    """The context of a call whose rows attend a prefix of what they attended at
    the previous call, wherever the slots now sit (History._moved): ``previous``'s
    chain elements, by rank, of the row each row continues. ``slot`` ``[B', W]``:
    each previous element's rank (the rest to a spare column ``W``); ``at`` ``[B, T]``:
    each cached slot's rank; ``attended`` ``[B, T]``; ``rows`` ``[B]``: the previous
    row each row continues (None: its own)."""

    previous: Chains
    slot: torch.Tensor
    at: torch.Tensor
    attended: torch.Tensor
    rows: torch.Tensor | None

    def labels(self) -> torch.Tensor:
        """``[B, T, 4]`` the labels of the cached slots, unattended ones unread."""
        every = self.previous.labels()
        b, width = self.slot.shape
        labels = every.new_full((b, width + 1, 4), -1).scatter(1, self.slot[..., None].expand(-1, -1, 4), every)
        if self.rows is not None:
            labels = labels[self.rows]
        return torch.where(self.attended[..., None], labels.gather(1, self.at[..., None].expand(-1, -1, 4)),
                           like(UNREAD, every))


@dataclass(frozen=True)
class Extended:
    """The context of a call read as lists (:func:`~batchspec.invariants.small.few`) after a
    call whose own context is not read yet: the first ``t`` labels of ``previous``'s slots
    after it. So a realignment's labels, carried by rank, are built only if something reads them."""

    previous: Chains
    t: int

    def labels(self) -> torch.Tensor:
        """``[B, T, 4]`` the labels of the cached slots."""
        return head(self.previous.labels(), self.t)


@dataclass(frozen=True)
class Own:
    """The context of a call whose chain of lazy contexts was cut (:func:`link`), read
    from the call's own chain: the first ``T`` of its ``token``, ``rank``, ``before``
    and ``attended``. Every attended slot of a chain read from a carried context holds
    the element C1 checked there (at the call that wrote it, when C1 held there), so its
    label is its writer's own: that token, fed at that rank, after that prefix (Spec
    §3.12.2), not the label table's, which merges writers; the rest are unread, as
    :class:`Moved` reads them."""

    token: torch.Tensor
    rank: torch.Tensor
    before: torch.Tensor
    attended: torch.Tensor
    previous = None  # no Chains kept alive

    def labels(self) -> torch.Tensor:
        """``[B, T, 4]`` the labels of the cached slots."""
        quad = torch.stack([self.token, self.rank, self.before, torch.full_like(self.token, WRITTEN)], -1)
        return torch.where(self.attended[..., None], quad, like(UNREAD, quad))


#: Where a call's context labels come from.
Source = Moved | Extended | Own


def link(before: Chains) -> int:
    """The depth of a call whose context is read from ``before``'s. Every :data:`DEPTH`
    calls the chain of lazy contexts is cut: ``before``'s context is then read from its
    own chain when first needed (:class:`Own`), not built from the calls before it, so
    that neither the work nor the Chains kept alive grow with the run."""
    if before.source is not None and before.depth + 1 >= DEPTH:  # (a depth is only set with a source)
        t = before.cached
        before.source = Own(before.token[:, :t], before.rank[:, :t], before.before[:, :t], before.attended[:, :t])
        before.depth = 0
    return before.depth + 1
