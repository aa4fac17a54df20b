"""``watch``: fill the observations of any decoder from its models' own forward calls (Spec §3.9).

Glue for a decoder that calls Hugging Face models::

    with batchspec.invariants.watch(target=target, draft=draft) as w:
        my_decoder(target, draft, prompts, on_boundary=w.boundary)
    assert not w.violations, w.report()  # e.g. in the user's CI

Public forward hooks (``register_forward_pre_hook(with_kwargs=True)`` and
``register_forward_hook(with_kwargs=True)``) record what every call was
really given: input ids, attention mask, position ids (the model's own
default, ``T .. T+n-1``, when none is passed), the cache's length *before*
the call, the cache object and the logits. The hooks exist only inside the
``with`` block: outside it the models run untouched.

What a forward call cannot show is the grid the decoder holds between rounds;
the decoder says it with one call, :meth:`Watch.boundary`, after prefill and
after every round's realignment. Everything else is derived from the calls:
``p_i`` and ``c_i`` from that mask, the drafts from the draft model's greedy
choices, the tokens a round commits from the target's logits (greedy
acceptance), and the step of each call (no cache: prefill; draft model:
draft; target: verify).

Greedy decoders only: the drafts are taken to be the draft model's
``argmax`` and the committed tokens the target's greedy acceptance. A
decoder that feeds any other draft (a sampling decoder, whose drafts are
drawn from ``q``) is refused with a ``ValueError`` at the first such call
rather than reported as I4/I5/I7 violations about a decoder it is not:
those invariants would be checked against choices the decoder never made.
For a sampler, fill :class:`Observation` records by hand with the tokens it
committed and its rule (``sampled``, I8, Spec §3.8); I1–I4 and I6 hold for
it unchanged, I5 is replaced by I8.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import Cache

from ._util import on
from .checker import violations as check_all
from .ledger import Ledger
from .observation import CacheView, ForwardCall, Observation
from .registry import INVARIANTS
from .violation import InvariantViolation


class Watch:
    """The recorder of one ``with watch(...)`` block; see :func:`watch`."""

    def __init__(self, models: dict, check: str, oracle, registry, structural: bool):
        if check not in ("raise", "record"):
            raise ValueError(f"watch: check must be 'raise' or 'record', got {check!r}")
        self.models, self.mode, self.oracle, self.registry = models, check, oracle, registry
        self.ledger = None if structural else Ledger(derived=True)
        self.violations: list = []
        #: the :class:`Observation` whose check found the first violation (None while
        #: clean): its tensors are the decoder's own, as they were then when
        #: ``check="raise"`` stopped the decoder there (for a picture of it).
        self.caught = None
        self.calls = 0
        self.steps = 0
        self.round = 0
        self.grid = None  # (tokens [B, L], mask [B, L], requests) of the last boundary
        self.caches: dict = {}  # model -> the cache object it last ran with
        self.prefill: list[ForwardCall] = []
        self.drafts = None  # [B, j] greedy drafts of the current round
        self.verified = False  # the target has verified this round's drafts
        self._pending: dict = {}  # model -> (cache object, T) between pre-hook and hook
        self._handles: list = []
        self._checking = False  # the semantic oracle's own forwards are not the decoder's

    # --- hooks ------------------------------------------------------------------------------

    def attach(self) -> None:
        for name, model in self.models.items():
            self._handles.append(model.register_forward_pre_hook(self._before(name), with_kwargs=True))
            self._handles.append(model.register_forward_hook(self._after(name), with_kwargs=True))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _before(self, name):
        def hook(_module, _args, kwargs):
            if self._checking:
                return
            # whichever keyword carries it (``cache=``; the deprecated spelling too)
            cache = next((v for v in kwargs.values() if isinstance(v, Cache)), None)
            t = CacheView.from_hf(cache).length
            if t and self.grid is not None and name in self.caches and cache is not self.caches[name]:
                raise ValueError(f"watch: the {name} model ran with another cache object than the one "
                                 f"boundary() last saw; pass {name}_cache= to boundary() when the decoder "
                                 "replaces a cache")
            self._pending[name] = (cache, t)
        return hook

    def _after(self, name):
        def hook(_module, args, kwargs, output):
            if self._checking:
                return
            cache, t = self._pending.pop(name)
            cache = cache if cache is not None else getattr(output, "cache", None)  # one the model made
            self.caches[name] = cache
            self._record(name, self._call(name, args, kwargs, t, output.logits), cache)
        return hook

    @staticmethod
    def _call(name, args, kwargs, t, logits) -> ForwardCall:
        ids = kwargs.get("input_ids", args[0] if args else None)  # [B, n]
        if ids is None:
            raise ValueError(f"watch: the {name} model was called without input_ids (inputs_embeds "
                             "cannot be traced to tokens)")
        b, n = ids.shape
        mask = kwargs.get("attention_mask")
        mask = torch.ones((b, t + n), dtype=torch.long, device=ids.device) if mask is None else mask
        if mask.dim() == 4:  # what the attention reads, as batchspec's own decoders pass it after prefill
            mask = key_mask(mask, name)
        positions = kwargs.get("position_ids")
        if positions is None:  # what the model uses then: the cache slots' indices
            positions = torch.arange(t, t + n, device=ids.device).expand(b, n)
        return ForwardCall(name, ids, mask, positions, t, logits)

    # --- steps ------------------------------------------------------------------------------

    def _record(self, name: str, call: ForwardCall, cache) -> None:
        self.calls += 1
        if self.grid is None or call.cache_length == 0:
            self.prefill.append(call)  # fingerprinted at the boundary, once the rows' requests are known
            return
        if self.ledger is not None:
            self.ledger.record(call, CacheView.from_hf(cache), self.grid[2])
            self.ledger.mark(call)
        if name == "draft":
            if self.drafts is None:
                self.drafts = call.input_ids.new_zeros((call.input_ids.shape[0], 0))
            slot = call.cache_length - (self.grid[0].shape[1] - 1)  # drafts already fed
            if not self.verified and 0 < slot <= self.drafts.shape[1]:
                self._greedy(call.input_ids[:, :1], self.drafts[:, slot - 1: slot], "draft")
            if not self.verified and slot == self.drafts.shape[1]:
                self.drafts = torch.cat([self.drafts, call.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            self._check("draft", [call], None)
        else:
            self.verified = True
            if self.drafts is not None:  # a catch-up call before verification proposed one too many
                self.drafts = self.drafts[:, : max(call.input_ids.shape[1] - 1, 0)]
                self._greedy(call.input_ids[:, 1:], self.drafts, "target")
            self._check("verify", [call], self._committed(call))

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
        if call.logits is None or call.logits.shape[1] != call.input_ids.shape[1]:
            return None  # I5 reports the missing logits
        choice = call.logits.argmax(-1)  # [B, n]
        agree = (call.input_ids[:, 1:] == choice[:, :-1]).long().cumprod(1).sum(1)  # [B] m_i
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
                self.caches[name] = cache
        self.grid = (tokens, mask, list(requests))
        calls, self.prefill, self.drafts, self.verified = self.prefill, [], None, False
        self._check("prefill" if calls else "align", calls, None)
        self.round += 1

    def _check(self, step: str, calls: list, committed) -> None:
        tokens, mask, requests = self.grid
        length = [int(c) for c in (mask != 0).sum(1).tolist()]
        drafts = self.drafts if self.drafts is not None else tokens.new_zeros((tokens.shape[0], 0))
        obs = Observation(self.round, step, tokens, mask, [tokens.shape[1] - c for c in length], length,
                          {name: CacheView.from_hf(c) for name, c in self.caches.items()}, calls,
                          list(requests), drafts if step in ("draft", "verify") else None, committed)
        if step == "verify" and committed is None:
            obs.committed = [[] for _ in requests]  # I5 reports why nothing could be derived
        self.steps += 1
        self._checking = True
        try:
            found = check_all(obs, self.oracle, self.registry, self.ledger)
        finally:
            self._checking = False
        self.violations.extend(found)
        if found and self.caught is None:
            self.caught = obs
        if found and self.mode == "raise":
            raise InvariantViolation(found[0], tuple(found[1:]))

    def report(self) -> str:
        """A short account: calls and steps checked, then the first violations."""
        head = (f"watched {self.calls} forward calls, checked {self.steps} steps over "
                f"{max(self.round - 1, 0)} rounds: ")
        if not self.violations:
            return head + "no violation"
        lines = [head + f"{len(self.violations)} violations"]
        lines += [f"  {v}" for v in self.violations[:5]]
        return "\n".join(lines)


def key_mask(mask: torch.Tensor, name: str) -> torch.Tensor:
    """A ``[B, 1, n, T + n]`` attention mask (boolean, or additive: 0 where
    attended) read as the ``[B, T + n]`` mask it expands (Spec §2.4): its
    last input's row, which in a causal mask sees every slot the row
    attends. A 4D mask that is not that row made causal among the inputs
    (per head, or not causal) has no one mask per row to check against the
    grid, and is refused with ``ValueError``."""
    seen = mask if mask.dtype == torch.bool else mask == 0
    rows = seen[:, 0, -1, :]  # [B, T + n]
    n, width = seen.shape[2], seen.shape[3]
    slots = torch.arange(width, device=mask.device)
    causal = slots[None, :] <= slots[width - n:, None]  # [n, T + n]
    if seen.shape[1] != 1 or not torch.equal(seen[:, 0], rows[:, None, :] & causal):
        raise ValueError(f"watch: the {name} model was given a 4D attention mask {tuple(mask.shape)} that "
                         "is not one row mask per sequence made causal over the inputs; pass the "
                         "[B, T + n] mask, or that expansion of it")
    return rows.long()


@contextmanager
def watch(target, draft=None, check: str = "raise", oracle=None, registry=INVARIANTS, structural=False):
    """Record and check every forward call ``target`` and ``draft`` make inside
    the block (Spec §3.9). ``check``: ``"raise"`` (raise
    :class:`InvariantViolation` from the offending call) or ``"record"``
    (collect in ``w.violations``). ``oracle`` switches on semantic I3
    (:func:`batchspec.oracle.hf_oracle`); ``registry`` selects the invariant
    set (e.g. :data:`~batchspec.invariants.holes.HOLE_AWARE`); ``structural``
    turns the ledger checks I6/I7 off. Yields the :class:`Watch`."""
    models = {"target": target} if draft is None else {"target": target, "draft": draft}
    w = Watch(models, check, oracle, registry, structural)
    w.attach()
    try:
        yield w
    finally:
        w.detach()
