"""The layout half of ``watch``: observations rebuilt from the calls and ``boundary()`` (Spec §3.9).

A decoder in the paper's compact layout may also describe its grid with one
call, :meth:`Layout.boundary` (``w.boundary``), after prefill and after every
round's realignment; from then on the calls are checked against I1–I8 as
well, with ``p_i``/``c_i`` from that mask, the drafts from the draft model's
greedy choices, the commits from the target's logits. Those derivations are
greedy: a decoder that feeds another draft is refused with a ``ValueError``
at the first such call rather than reported as I4/I5/I7 violations about a
decoder it is not. For a sampler, fill :class:`~batchspec.invariants.Observation`
records by hand (I8, Spec §3.8).
"""

from __future__ import annotations

import weakref

import torch

from ._util import on
from .checker import violations as check_all
from .ledger import Ledger
from .observation import CacheView, ForwardCall, Observation


class Layout:
    """The layout invariants I1–I8 of one ``watch`` block (Spec §3.9): each call the
    hooks saw, grouped into the steps between two :meth:`boundary` calls;
    ``found(violations, observation)`` receives what the checks find."""

    def __init__(self, oracle, registry, structural: bool, memo, found):
        self.oracle, self.registry, self.memo, self.found = oracle, registry, memo, found
        self.ledger = None if structural else Ledger(derived=True)
        self.steps = 0
        self.round = 0
        self.grid = None  # (tokens [B, L], mask [B, L], requests) of the last boundary
        #: model -> the cache object it last ran with, held weakly (:meth:`ran`)
        self.caches: dict = {}
        self.prefill: list[ForwardCall] = []
        self.drafts = None  # [B, j] greedy drafts of the current round
        self.verified = False  # the target has verified this round's drafts
        self.checking = False  # the semantic oracle's own forwards are not the decoder's

    def ran(self, name: str, cache) -> None:
        """``name`` ran with ``cache``: held weakly, so that watching keeps alive no cache
        the decoder has dropped (one that rebuilds its caches every round would
        otherwise hold two of each until the model's next call)."""
        if cache is None:  # none passed or returned: nothing to hold
            self.caches[name] = None
            return
        try:
            self.caches[name] = weakref.ref(cache)
        except TypeError:  # an object that takes no weak reference: held as it is
            self.caches[name] = lambda: cache

    def cache(self, name: str):
        """The cache object ``name`` last ran with (or boundary() was given), None once dropped."""
        held = self.caches.get(name)
        return None if held is None else held()

    def refuse_another_cache(self, name: str, cache, t: int) -> None:
        """Before a call: the layout checks read the cache object boundary() last saw."""
        if t and self.grid is not None and name in self.caches and cache is not self.cache(name):
            raise ValueError(f"watch: the {name} model ran with another cache object than the one "
                             f"boundary() last saw; pass {name}_cache= to boundary() when the decoder "
                             "replaces a cache")

    def record(self, name: str, call: ForwardCall, cache) -> None:
        """The layout checks (I1-I8), once boundary() has described the grid. A
        call over an empty cache after it is a round's (the prefill fed
        nothing, Spec §4.1): it feeds the grid before the newest token."""
        if self.grid is None:
            if call.cache_length == 0:  # without boundary(), keep prefills only
                # fingerprinted at the boundary, once the rows' requests are known (no prefill check reads logits)
                self.prefill.append(call.without_logits())
            return
        if call.input_ids.shape[0] != self.grid[0].shape[0]:
            raise ValueError(f"watch: the {name} model was called on {call.input_ids.shape[0]} rows, but the "
                             f"grid of the last boundary() has {self.grid[0].shape[0]}: the layout checks "
                             "(I1-I8) need calls over the whole grid; without boundary() calls, watch checks "
                             "the correctness invariants C1-C3, which hold for any schedule")
        if self.ledger is not None:
            self.ledger.record(call, CacheView.from_hf(cache), self.grid[2], self.memo)
            self.ledger.mark(call)
        if name == "draft":
            if self.drafts is None:
                self.drafts = call.input_ids.new_zeros((call.input_ids.shape[0], 0))
            slot = self._drafts_fed(call)  # its last input: the newest token (0) or draft slot - 1
            if not self.verified and 0 < slot <= self.drafts.shape[1]:
                self._greedy(call.input_ids[:, -1:], self.drafts[:, slot - 1: slot], "draft")
            if not self.verified and slot == self.drafts.shape[1]:
                self.drafts = torch.cat([self.drafts, call.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            self._check("draft", [call], None)
        else:
            self.verified = True
            if self.drafts is not None:  # a catch-up call before verification proposed one too many
                k = max(self._drafts_fed(call), 0)
                self.drafts = self.drafts[:, :k]
                self._greedy(call.input_ids[:, call.input_ids.shape[1] - k:], self.drafts, "target")
            self._check("verify", [call], self._committed(call))

    def _drafts_fed(self, call: ForwardCall) -> int:
        """How many of the round's drafts ``call`` fed, the grid's ``L`` slots
        first: its inputs end at slot ``T + n - 1``."""
        return call.cache_length + call.input_ids.shape[1] - self.grid[0].shape[1]

    @staticmethod
    def _greedy(fed, drafts, name) -> None:
        """Refuse a decoder whose drafts are not the draft model's greedy choices
        (Spec §3.9): the recorder derives drafts and commits by ``argmax``, so on a
        sampling decoder its I4/I5/I7 reports would be about a decoder it is not
        watching."""
        drafts = on(drafts, fed.device)  # the draft model may sit on another device than the target
        if fed.shape == drafts.shape and not torch.equal(fed, drafts):
            i, j = (fed != drafts).nonzero()[0].tolist()
            raise ValueError(
                f"watch: the {name} model was fed draft token {int(fed[i, j])} in row {i}, not the draft "
                f"model's greedy choice {int(drafts[i, j])}. watch checks greedy decoders only (it derives "
                "the drafts and the committed tokens by argmax); a sampling decoder is out of its scope: "
                "fill Observations by hand with committed= and sampled= (I8, Spec §3.8). A greedy decoder "
                "that feeds another draft has a bug (I4, draft/target sync).")

    def _committed(self, call: ForwardCall) -> list | None:
        """Greedy acceptance on what the target really returned: the drafts it
        fed that match its own choice, then its choice (Spec §4.3.1)."""
        k = max(self._drafts_fed(call), 0)  # the inputs from the newest token on: k' + 1
        if call.logits is None or call.logits.shape[1] < k + 1:
            return None  # I5 reports the missing logits
        fed, choice = call.input_ids[:, -(k + 1):], call.logits[:, -(k + 1):].argmax(-1)  # [B, k'+1] each
        agree = (fed[:, 1:] == choice[:, :-1]).long().cumprod(1).sum(1)  # [B] m_i
        return [choice[i, : int(m) + 1].tolist() for i, m in enumerate(agree)]

    def boundary(self, tokens, mask, requests=None, target_cache=None, draft_cache=None) -> None:
        """The decoder holds grid ``tokens`` ``[B, L]`` with attention ``mask``
        ``[B, L]``: after prefill, and after each round's realignment.
        ``requests`` names each row (needed once rows leave the batch; default
        row ``i`` is request ``i``); pass a cache only when the decoder replaced
        the cache object (default: the one the model last ran with)."""
        if requests is None:
            requests = list(range(tokens.shape[0])) if self.grid is None else self.grid[2]
            if len(requests) != tokens.shape[0]:
                raise ValueError(f"boundary: the batch went from {len(requests)} rows to {tokens.shape[0]}; "
                                 "pass requests= (the request id of each remaining row)")
        for name, cache in (("target", target_cache), ("draft", draft_cache)):
            if cache is not None:
                self.ran(name, cache)
        if gone := [name for name, held in self.caches.items() if held is not None and held() is None]:
            raise ValueError(f"boundary: the cache object the {' and the '.join(gone)} model last ran with is "
                             f"gone (the decoder replaced it); pass {' and '.join(n + '_cache=' for n in gone)} "
                             "to boundary() when the decoder replaces a cache")
        step = "prefill" if self.grid is None else "realign"  # a prefill may feed nothing (Spec §4.1)
        self.grid = (tokens, mask, list(requests))
        calls, self.prefill, self.drafts, self.verified = self.prefill, [], None, False
        self._check(step, calls, None)
        self.round += 1

    def _check(self, step: str, calls: list, committed) -> None:
        tokens, mask, requests = self.grid
        length = [int(c) for c in (mask != 0).sum(1).tolist()]
        drafts = self.drafts if self.drafts is not None else tokens.new_zeros((tokens.shape[0], 0))
        obs = Observation(self.round, step, tokens, mask, [tokens.shape[1] - c for c in length], length,
                          {name: CacheView.from_hf(self.cache(name)) for name in self.caches}, calls,
                          list(requests), drafts if step in ("draft", "verify") else None, committed)
        if step == "verify" and committed is None:
            obs.committed = [[] for _ in requests]  # I5 reports why nothing could be derived
        self.steps += 1
        self.checking = True
        try:
            found = check_all(obs, self.oracle, self.registry, self.ledger, self.memo)
        finally:
            self.checking = False
        self.found(found, obs)
