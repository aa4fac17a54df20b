"""``watch``: check any decoder from its models' own forward calls (Spec §3.12, §3.9).

With no glue at all::

    with batchspec.invariants.watch(target=target, draft=draft) as w:
        out = any_decoder(target, draft, prompts)
        w.outputs(prompts, out, max_new_tokens=32, eos_token_id=eos)  # optional: C2 and C3
    assert not w.violations, w.report()  # e.g. in the user's CI

Public forward hooks (``register_forward_pre_hook(with_kwargs=True)`` and
``register_forward_hook(with_kwargs=True)``) record what every call was
really given: input ids, attention mask, position ids (the model's own
default, ``T .. T+n-1``, when none is passed), the cache's length *before*
the call, the cache object and the logits. The hooks exist only inside the
``with`` block: outside it the models run untouched.

**Correctness (level (a), always on).** Every call of either model is
checked against C1 (:func:`~batchspec.invariants.correctness.one_chain`): its
rows' attended slots, then inputs, are one chain at positions 0, 1, …, each
slot holding what a call wrote for that token after that prefix (read back
from the slot's content, Spec §3.12.1); a model's sliding-window layers by C1's
window rule (:mod:`~batchspec.invariants.window`). Caches are read through
transformers' public per-layer API (:mod:`~batchspec.invariants.hf_cache`:
dynamic and static layers, full or windowed; what cannot be read is refused
by name before the call). ``w.outputs`` checks C2 (every
returned token is the target's choice on exactly its prefix, traced back to
the first wrong call) and C3 (stops at its own EOS or its budget). Any
layout, padding, cache handling and call schedule; greedy decoders.

**Layout (level (b), opt in).** A decoder in the paper's compact layout may
also describe its grid with one call, :meth:`Watch.boundary`, after prefill
and after every round's realignment; from then on the calls are checked
against I1–I8 as well, with ``p_i``/``c_i`` from that mask, the drafts from
the draft model's greedy choices, the commits from the target's logits.
Those derivations are greedy: a decoder that feeds another draft is refused
with a ``ValueError`` at the first such call rather than reported as
I4/I5/I7 violations about a decoder it is not. For a sampler, fill
:class:`Observation` records by hand (I8, Spec §3.8).
"""

from __future__ import annotations

import bisect
import time
from contextlib import contextmanager
from dataclasses import replace

import torch
from transformers import Cache

from ._util import on
from .checker import violations as check_all
from .correctness import one_chain
from .outputs import stops_where_it_should, target_choices
from .history import History
from .hf_cache import ABSENT, column_hashes, kinds_of, refuse_cache
from .stream import special_ids
from .ledger import Ledger
from .masks import key_mask
from .memo import Memo
from .observation import CacheView, ForwardCall, Observation
from .registry import INVARIANTS
from .violation import InvariantViolation
from .window import check_window, window_call, windows_before


class Watch:
    """The recorder of one ``with watch(...)`` block; see :func:`watch`."""

    def __init__(self, models: dict, check: str, oracle, registry, structural: bool):
        if check not in ("raise", "record"):
            raise ValueError(f"watch: check must be 'raise' or 'record', got {check!r}")
        self.models, self.mode, self.oracle, self.registry = models, check, oracle, registry
        #: per model, its attention layers by kind (refused here when watch cannot read one)
        self.kinds = {name: kinds_of(model, name) for name, model in models.items()}
        self.depth = {name: getattr(getattr(model, "config", None), "num_hidden_layers", None) or 0
                      for name, model in models.items()}
        self.ledger = None if structural else Ledger(derived=True)
        self.memo = Memo()  # what the layout checks build once (a round's masks), for this block only
        self.violations: list = []
        #: the correctness checker's memory (C1-C3, Spec §3.12): labels of every slot
        #: written, and what the target chose after every chain it ran on
        self.history = History()
        self.history.stream.eos, self.history.stream.pad = special_ids(models["target"])
        self.outputs_checked = 0
        #: seconds spent checking, in the hooks and in outputs(): what the checker costs
        #: the decoder (benchmarks/check_overhead.py reports it against decode time)
        self.check_seconds = 0.0
        self.check_cpu_seconds = 0.0  # the same, in process CPU time
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

    def _role(self, name: str, module) -> str:
        """``"draft"`` for a target call that runs only its first layers (transformers'
        early-exit drafting, ``assistant_early_exit``: the model is its own draft,
        over a cache of its own), else ``name``."""
        layers = getattr(getattr(module, "config", None), "num_hidden_layers", None)
        if name != "target" or layers is None or "draft" in self.models or layers >= self.depth["target"]:
            return name
        if "draft" not in self.kinds:
            self.kinds["draft"] = {k: [i for i in v if i < layers] for k, v in self.kinds["target"].items()}
            self.kinds["draft"] = {k: v for k, v in self.kinds["draft"].items() if v}
        return "draft"

    def _before(self, model_name):
        def hook(module, args, kwargs):
            if self._checking:
                return
            name = self._role(model_name, module)
            start, cpu = time.perf_counter(), time.process_time()
            # whichever keyword carries it (``cache=``; the deprecated spelling too)
            cache = next((v for v in kwargs.values() if isinstance(v, Cache)), None)
            refuse_cache(cache, name)  # before the call runs: one line naming the layer type and why
            t = CacheView.length_of(cache)
            ids = kwargs.get("input_ids", args[0] if args else None)
            windows = windows_before(self.history.hasher, self.kinds[name], cache, t,
                                     0 if ids is None else ids.shape[1])
            self._spent(start, cpu)
            if t and self.grid is not None and name in self.caches and cache is not self.caches[name]:
                raise ValueError(f"watch: the {name} model ran with another cache object than the one "
                                 f"boundary() last saw; pass {name}_cache= to boundary() when the decoder "
                                 "replaces a cache")
            self._pending[name] = (cache, t, windows)
        return hook

    def _after(self, model_name):
        def hook(module, args, kwargs, output):
            if self._checking:
                return
            name = self._role(model_name, module)
            start, cpu = time.perf_counter(), time.process_time()
            try:
                cache, t, windows = self._pending.pop(name)
                if cache is None:  # one the model made
                    cache = getattr(output, "cache", None)
                self.caches[name] = cache
                call = self._call(name, args, kwargs, t, output.logits, windows)
                self.calls += 1
                self._correct(name, call, cache, kwargs.get("attention_mask"), windows)
                if self.grid is not None or call.cache_length == 0:  # without boundary(), keep prefills only
                    self._record(name, call, cache)
            finally:
                self._spent(start, cpu)
        return hook

    def _spent(self, start: float, cpu: float) -> None:
        self.check_seconds += time.perf_counter() - start
        self.check_cpu_seconds += time.process_time() - cpu

    def _correct(self, name: str, call: ForwardCall, cache, raw, windows: list) -> None:
        """C1 on this call (Spec §3.12.2), whatever the decoder's layout and
        schedule; no boundary() needed: on the full-attention layers by the
        chain rule, on each window kind by the window rule. A call the checker
        cannot read is a ValueError saying what it could not read, never a
        crash inside it."""
        try:
            t, n = call.cache_length, call.input_ids.shape[1]
            if call.attention_mask.shape != (call.input_ids.shape[0], t + n):
                raise ValueError(f"its attention mask is {tuple(call.attention_mask.shape)}, not [B, T + n] = "
                                 f"[{call.input_ids.shape[0]}, {t + n}]")
            full = self.kinds[name].get("full")
            found, chains = [], None
            if full is not None:
                hashes = column_hashes(self.history.hasher, cache, full, 0, t + n) if cache is not None else None
                if t and (hashes is None or bool((hashes == ABSENT).any())):
                    raise ValueError(f"its cache holds fewer than the {t} slots before the call plus {n} inputs "
                                     "after it")
                chains = self.history.read(call, hashes)
                found = one_chain(chains)
            for w, layers, offset, held in windows:
                found += check_window(self.history, call, cache, raw, (w, layers, offset, held), chains is None)
            if chains is not None:
                self.history.remember(chains)
        except Exception as error:  # noqa: BLE001 - a crash here is the checker's, and must say what it could not read
            what = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error} (a checker bug)"
            raise ValueError(f"watch could not read call #{self.history.calls} of the {name} model: {what}") from error
        self._found(found)

    def _found(self, found: list, obs=None) -> None:
        for v in found:  # record mode: the earliest wrong call first (C1 names one before the call it checks)
            bisect.insort(self.violations, v, key=lambda u: (u.call is None, u.call or 0))
        if found and obs is not None and self.caught is None:
            self.caught = obs
        if found and self.mode == "raise":
            raise InvariantViolation(found[0], tuple(found[1:]))

    def outputs(self, prompts, sequences, max_new_tokens=None, eos_token_id=None, pad_token_id=None) -> list:
        """C2 and C3 (Spec §3.12.3, §3.12.4): check what the decoder returned against what the
        watched target calls chose. ``sequences[r]``: the tokens generated for
        ``prompts[r]``, without the prompt. Returns the violations found (and
        raises at the first one under ``check="raise"``). C2 judges greedy outputs
        only: a sampled or beam-searched output is reported as tokens the target
        did not choose (C1 holds for those decoders and is checked on every call)."""
        if len(prompts) != len(sequences):
            raise ValueError(f"outputs: {len(prompts)} prompts but {len(sequences)} sequences")
        start, cpu = time.perf_counter(), time.process_time()
        found = (target_choices(self.history, prompts, sequences, eos_token_id)
                 + stops_where_it_should(self.history, prompts, sequences, max_new_tokens, eos_token_id,
                                         pad_token_id))
        found.sort(key=lambda v: (v.call is None, v.call or 0))  # the first wrong call first
        self._spent(start, cpu)
        self.outputs_checked += len(prompts)
        self._found(found)
        return found

    def _call(self, name, args, kwargs, t, logits, windows=()) -> ForwardCall:
        ids = kwargs.get("input_ids", args[0] if args else None)  # [B, n]
        if ids is None:
            raise ValueError(f"watch: the {name} model was called without input_ids (inputs_embeds "
                             "cannot be traced to tokens)")
        b, n = ids.shape
        mask = kwargs.get("attention_mask")
        if isinstance(mask, dict):  # transformers' per-kind masks (a static cache of a mixed model)
            mask = mask.get("full_attention", mask.get("sliding_attention"))
        if mask is not None and mask.dim() == 4 and windows and "full" not in self.kinds[name]:
            w, _, offset, _ = windows[0]  # no full-attention layer: the columns the window layers attend
            mask = window_call(ForwardCall(name, ids, None, None, t), mask, w, offset)[0].attention_mask
            mask = torch.cat([mask.new_zeros((b, t + n - mask.shape[1])), mask], 1)
        mask = torch.ones((b, t + n), dtype=torch.long, device=ids.device) if mask is None else mask
        if mask.dim() == 4:  # what the attention reads, as batchspec's own decoders pass it over a non-empty cache
            mask = key_mask(mask, name, self.memo, t + n)
        positions = kwargs.get("position_ids")
        if positions is None:  # what the model uses then: the cache slots' indices
            positions = torch.arange(t, t + n, device=ids.device).expand(b, n)
        return ForwardCall(name, ids, mask, positions, t, logits)

    # --- steps ------------------------------------------------------------------------------

    def _record(self, name: str, call: ForwardCall, cache) -> None:
        """The layout checks (I1-I8), once boundary() has described the grid. A
        call over an empty cache after it is a round's (the prefill fed
        nothing, Spec §4.1): it feeds the grid before the newest token."""
        if self.grid is None:
            # fingerprinted at the boundary, once the rows' requests are known (no prefill check reads logits)
            self.prefill.append(replace(call, logits=None))
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
                self.caches[name] = cache
        step = "prefill" if self.grid is None else "align"  # a prefill may feed nothing (Spec §4.1)
        self.grid = (tokens, mask, list(requests))
        calls, self.prefill, self.drafts, self.verified = self.prefill, [], None, False
        self._check(step, calls, None)
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
            found = check_all(obs, self.oracle, self.registry, self.ledger, self.memo)
        finally:
            self._checking = False
        self._found(found, obs)

    def report(self) -> str:
        """A short account: calls, outputs and layout steps checked, then the first violations."""
        head = f"watched {self.calls} forward calls"
        head += (f", checked {self.outputs_checked} outputs" if self.outputs_checked
                 else " (outputs not checked: call w.outputs(...))")
        if self.steps:
            head += f", {self.steps} layout steps over {max(self.round - 1, 0)} rounds"
        head += ": "
        if not self.violations:
            return head + "no violation"
        lines = [head + f"{len(self.violations)} violations"]
        lines += [f"  {v}" for v in self.violations[:5]]
        return "\n".join(lines)


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
    if w.calls == 0:
        raise ValueError("watch: no forward call of the watched models was made inside the block, so nothing "
                         "was checked (did the decoder run these very model objects?)")
