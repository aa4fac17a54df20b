"""The checker's memory across steps: slot fingerprints and pending commits (Spec §3.6, §3.7).

The predicates I1–I5 read one observation. Two questions need history:
*does the slot where a committed token now lives hold the key/value that was
written for that token?* (I6, cache provenance) and *did the grid gain
exactly the tokens the verify step committed?* (I7, committed stream). The
:class:`Ledger` remembers what is needed for both, and nothing else:

* for every ``(model, request, content index)`` the token a forward call fed
  there and a *fingerprint* of the key it wrote: a fixed random projection of
  the key vector at the first and the last layer, two numbers per slot;
* for every request whose tokens a step committed, the content it had then
  and the committed tokens, until the next boundary step.

Fingerprints are taken from the cache the call really wrote, so they cost a
matrix-vector product over the new slots only, and no extra forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ._util import on
from .observation import CacheView, ForwardCall, Observation

if TYPE_CHECKING:
    from .memo import Memo

#: Never-written marker in the token table.
UNWRITTEN = -1


def fingerprints(view: CacheView, start: int, stop: int, tokens: torch.Tensor | None = None,
                 memo: Memo | None = None) -> torch.Tensor:
    """``[B, stop - start, 2]``: slots ``start .. stop-1`` of ``view`` projected on
    a fixed random direction, at the first and at the last layer's keys (Spec §3.6);
    with ``tokens`` ``[B, stop - start]``, their ids follow as a third column.

    Layer 0's key depends only on the token and its position; the last
    layer's depends on everything the token attended to. The projection is
    computed in at least float32 (the direction's dtype promotes the keys'),
    so summation order cannot move it by more than :data:`TOLERANCE` allows.
    One product and two sums per layer (over ``head_dim``, then the heads), on
    the keys' own device. A slot that was only copied usually gets the very
    same bits whether it is fingerprinted alone or with the whole cache, but
    not always: how a reduction is vectorised can depend on the shape, which
    is what :data:`TOLERANCE` is for. ``memo`` keeps the directions built.
    """
    parts = []
    for keys, _values in (view.layers[0], view.layers[-1]) if len(view.layers) > 1 else view.layers:
        part = keys[:, :, start:stop]  # [B, H, n, D]
        print_ = (part * (direction(part) if memo is None else memo.direction(part))).sum(3).sum(1)  # [B, n]
        parts.append(on(print_, parts[0].device) if parts else print_)
    if len(parts) == 1:  # a one-layer model: its first layer is its last
        parts.append(parts[0])
    if tokens is not None:
        parts.append(tokens.to(parts[0]))  # exact: ids are far below 2**24
    return torch.stack(parts, dim=-1)  # [B, n, 2 or 3]


def direction(keys: torch.Tensor) -> torch.Tensor:
    """A fixed random direction ``[H, 1, D]`` of unit expected norm for ``keys``
    ``[B, H, n, D]`` (seed 0, the same on every device), in float64 for float64
    keys and float32 otherwise, on the keys' device (a :class:`Memo` keeps it)."""
    heads, dim = keys.shape[1], keys.shape[3]
    dtype = torch.float64 if keys.dtype == torch.float64 else torch.float32
    g = torch.Generator().manual_seed(0)
    d = torch.randn(heads, dim, generator=g, dtype=torch.float64) / (heads * dim) ** 0.5
    return d.to(keys.device, dtype)[:, None, :]


#: Largest |now - written| / (1 + |written|) of a slot's fingerprint, by the
#: fingerprint's dtype. Moving a slot is an exact copy (0 difference); a
#: different token, position or context moves the projection by order 1e-1.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}


class _Table:
    """One model's writes: ``entries[row, j]`` = (fingerprint at layer 0, at the
    last layer, token id) of content index ``j`` of the request in ``row``.

    The token id is stored as a float beside the fingerprints so that one
    gather reads both (exact: ids are far below 2**24). Two columns past
    every index written so far are reserved: masked inputs are written into
    the last (index ``-1``, so no boolean indexing is needed), and reads beyond the
    written range land in the one before it, which stays unwritten.
    """

    def __init__(self, device, dtype):
        self.rows: dict = {}  # request -> ledger row
        self._last = None  # (requests, their rows [B, 1]) of the last call
        self.entries = torch.zeros((0, 0, 3), dtype=dtype, device=device)  # [R, N, 3]

    @property
    def unwritten(self) -> int:
        """The reserved column no write reaches."""
        return self.entries.shape[1] - 2

    def index(self, requests: list) -> torch.Tensor:
        """Ledger rows ``[B, 1]`` of ``requests``, adding the new ones."""
        key = tuple(requests)
        if self._last is None or self._last[0] != key:
            for r in requests:
                self.rows.setdefault(r, len(self.rows))
            self._last = (key, torch.tensor([[self.rows[r]] for r in requests], device=self.entries.device))
            self.grow(len(self.rows), 0)
        return self._last[1]

    def grow(self, rows: int, written: int) -> None:
        """Room for ``rows`` requests and content indices ``< written``."""
        r, n = self.entries.shape[:2]
        if rows <= r and written + 2 <= n:
            return
        rows, columns = max(rows, 2 * r), max(written + 2, 2 * n, 8)
        entries = self.entries.new_zeros((rows, columns, 3))
        entries[..., 2] = UNWRITTEN
        entries[:r, : max(n - 2, 0)] = self.entries[:, : max(n - 2, 0)]  # the old reserved columns stay unwritten
        self.entries = entries


class Ledger:
    """What the checker remembers between steps of one run (Spec §3.6, §3.7).

    Create one per run (or per :func:`batchspec.invariants.watch`) and pass it
    to :func:`batchspec.invariants.violations` with every observation, in order.
    """

    def __init__(self, derived: bool = False):
        #: ``committed`` was derived from the target's logits (by a recorder), not
        #: reported by the decoder: a row may then keep only a prefix of it (an
        #: EOS or budget cut the recorder cannot see), never another token.
        self.derived = derived
        self.tables: dict[str, _Table] = {}
        self.pending: dict = {}  # request -> (content before, committed tokens)
        self._recorded: set[int] = set()  # id() of calls already fingerprinted by a recorder

    def record(self, call: ForwardCall, view: CacheView, requests: list, memo: Memo | None = None) -> None:
        """Fingerprint the slots ``call`` wrote, read from ``view``, the model's
        cache after the call; ``requests[i]`` names batch row ``i``."""
        t, n = call.cache_length, call.input_ids.shape[1]
        if n == 0 or not view.layers or view.length < t + n or len(requests) != call.input_ids.shape[0]:
            return  # I2/I3/I4 report calls whose shapes do not add up
        mask = call.attention_mask
        if mask.shape[1] != t + n:
            return
        keys = view.layers[0][0]
        table = self.tables.get(call.model)
        if table is None:
            table = self.tables[call.model] = _Table(keys.device, torch.promote_types(keys.dtype, torch.float32))
        if table.entries.is_inference() and not torch.is_inference_mode_enabled():
            table.entries = table.entries.clone()  # made in an inference-mode step; written in place below
        rows = table.index(requests)  # [B, 1]
        table.grow(len(table.rows), t + n)  # content indices are < t + n
        # [B, n]; -1, the spare last column, at masked inputs
        _fed, index = call.content_positions() if memo is None else memo.content_positions(call)
        table.entries[rows, index] = fingerprints(view, t, t + n, call.input_ids, memo)  # [B, n, 3]

    def snapshot(self):
        """A copy to :meth:`restore` when a step is rolled back (a transactional caller)."""
        return (dict(self.pending), {m: (dict(t.rows), t.entries.clone()) for m, t in self.tables.items()})

    def restore(self, saved) -> None:
        """Forget everything recorded since ``saved`` was taken."""
        pending, tables = saved
        self.pending = dict(pending)
        self.tables = {}
        for model, (rows, entries) in tables.items():
            table = self.tables[model] = _Table(entries.device, entries.dtype)
            table.rows, table.entries = dict(rows), entries.clone()
        self._recorded.clear()

    def mark(self, call: ForwardCall) -> None:
        """``call`` was fingerprinted when it returned; :meth:`record_writes` skips it."""
        self._recorded.add(id(call))

    def record_writes(self, obs: Observation, memo: Memo | None = None) -> None:
        """Fingerprint the calls of ``obs`` no recorder saw, from the step's end caches (Spec §3.6)."""
        requests = obs.requests if obs.requests is not None else list(range(obs.tokens.shape[0]))
        for call in obs.calls:
            if id(call) in self._recorded:
                continue
            view = obs.caches.get(call.model)
            if view is not None:
                self.record(call, view, requests, memo)
        self._recorded.clear()

    def remember_commits(self, obs: Observation) -> None:
        """After the predicates: hold ``obs.committed`` until the next boundary (Spec §3.7)."""
        if obs.boundary:
            for r in self.requests(obs):
                self.pending.pop(r, None)
        if obs.committed is not None:
            for r, content, tokens in zip(self.requests(obs), obs.live_contents(), obs.committed):
                self.pending[r] = (content, list(tokens))

    @staticmethod
    def requests(obs: Observation) -> list:
        return obs.requests if obs.requests is not None else list(range(obs.tokens.shape[0]))
