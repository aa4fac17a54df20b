"""The correctness half of ``watch``: every forward call read and checked against C1 (Spec §3.12, §3.9).

Public forward hooks (``register_forward_pre_hook(with_kwargs=True)`` and
``register_forward_hook(with_kwargs=True)``) record what every call was
really given: input ids, attention mask, position ids (the model's own
default, ``T .. T+n-1``, when none is passed), the cache's length *before*
the call, the cache object and the logits. The hooks exist only inside the
``with`` block: outside it the models run untouched.

Every call of either model is checked against C1
(:func:`~batchspec.invariants.correctness.one_chain`): its rows' attended
slots, then inputs, are one chain at positions 0, 1, …, each slot holding
what a call wrote for that token after that prefix (read back from the
slot's content, Spec §3.12.1); a model's sliding-window layers by C1's
window rule (:mod:`~batchspec.invariants.window`). Caches are read through
transformers' public per-layer API (:mod:`~batchspec.invariants.hf_cache`:
dynamic and static layers, full or windowed; what cannot be read is refused
by name before the call). :meth:`Correctness.outputs` checks C2 (every returned
token is the target's choice on exactly its prefix, traced back to the first
wrong call) and C3 (stops at its own EOS or its budget). Each call then goes
on to the layout checks (:class:`~batchspec.invariants.watch_layout.Layout`).
"""

from __future__ import annotations

import time

import torch
from transformers import Cache

from .correctness import one_chain
from .outputs import stops_where_it_should, target_choices
from .history import History
from .hf_cache import ABSENT, Seal, kinds_of, refuse_cache
from .stream import special_ids
from .masks import key_mask
from .observation import CacheView, ForwardCall
from .window import check_window, window_call, windows_before


class Correctness:
    """The hooks of one ``watch`` block and the correctness invariants C1–C3 they
    check (Spec §3.12); ``found(violations)`` receives what they find, ``layout``
    every call."""

    def __init__(self, models: dict, memo, found, layout):
        self.models, self.memo, self.found, self.layout = models, memo, found, layout
        #: per model, its attention layers by kind (refused here when watch cannot read one)
        self.kinds = {name: kinds_of(model, name) for name, model in models.items()}
        self.depth = {name: getattr(getattr(model, "config", None), "num_hidden_layers", None) or 0
                      for name, model in models.items()}
        #: the correctness checker's memory (C1-C3, Spec §3.12): labels of every slot
        #: written, and what the target chose after every chain it ran on
        self.history = History()
        self.history.stream.eos, self.history.stream.pad = special_ids(models["target"])
        self.outputs_checked = 0
        #: seconds spent checking, in the hooks and in outputs(): what the checker costs
        #: the decoder (benchmarks/check_overhead.py reports it against decode time)
        self.check_seconds = 0.0
        self.check_cpu_seconds = 0.0  # the same, in process CPU time
        self.calls = 0
        #: per model, which cached columns still hold what was hashed after its last call
        self.seal = Seal()
        self._pending: dict = {}  # model -> (cache object, T) between pre-hook and hook
        self._handles: list = []
        self.accepted: set = set()  # the cache layer-type tuples refuse_cache let through

    def _spent(self, start: float, cpu: float) -> None:
        """Add the time since ``start`` (wall) and ``cpu`` (process CPU) to the check's cost."""
        self.check_seconds += time.perf_counter() - start
        self.check_cpu_seconds += time.process_time() - cpu

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
        if name != "target" or "draft" in self.models:  # (a config's attribute read costs microseconds)
            return name
        layers = getattr(getattr(module, "config", None), "num_hidden_layers", None)
        if layers is None or layers >= self.depth["target"]:
            return name
        if "draft" not in self.kinds:
            self.kinds["draft"] = {k: [i for i in v if i < layers] for k, v in self.kinds["target"].items()}
            self.kinds["draft"] = {k: v for k, v in self.kinds["draft"].items() if v}
        return "draft"

    def _before(self, model_name):
        def hook(module, args, kwargs):
            if self.layout.checking:  # the semantic oracle's own forwards are not the decoder's
                return
            name = self._role(model_name, module)
            start, cpu = time.perf_counter(), time.process_time()
            # whichever keyword carries it (``cache=``; the deprecated spelling too)
            cache = kwargs.get("cache")
            if not isinstance(cache, Cache):
                cache = next((v for v in kwargs.values() if isinstance(v, Cache)), None)
            refuse_cache(cache, name, self.accepted)  # before the call runs: one line naming the layer and why
            t = CacheView.length_of(cache)
            ids = kwargs.get("input_ids", args[0] if args else None)
            windows = windows_before(self.history.hasher, self.kinds[name], cache, t,
                                     0 if ids is None else ids.shape[1])
            self._spent(start, cpu)
            self.layout.refuse_another_cache(name, cache, t)
            self._pending[name] = (cache, t, windows)
        return hook

    def _after(self, model_name):
        def hook(module, args, kwargs, output):
            if self.layout.checking:
                return
            name = self._role(model_name, module)
            start, cpu = time.perf_counter(), time.process_time()
            try:  # the check's own tensors are inference tensors (no version counters, no autograd
                # dispatch: a fifth off each small op); nothing writes them outside these hooks
                with torch.inference_mode():
                    cache, t, windows = self._pending.pop(name)
                    if cache is None:  # one the model made
                        cache = getattr(output, "cache", None)
                    self.layout.ran(name, cache)
                    call = self._call(name, args, kwargs, t, output.logits, windows)
                    self.calls += 1
                    self._correct(name, call, cache, kwargs.get("attention_mask"), windows)
                    self.layout.record(name, call, cache)
            finally:
                self._spent(start, cpu)
        return hook

    def _correct(self, name: str, call: ForwardCall, cache, raw, windows: list) -> None:
        """C1 on this call (Spec §3.12.2), whatever the decoder's layout and
        schedule; no boundary() needed: on the full-attention layers by the
        chain rule, on each window kind by the window rule. A call the checker
        cannot read is a ValueError saying what it could not read, never a
        crash inside it."""
        number = self.history.calls + 1  # this call's number, as its violations would name it
        try:
            t, n = call.cache_length, call.input_ids.shape[1]
            if call.attention_mask.shape != (call.input_ids.shape[0], t + n):
                raise ValueError(f"its attention mask is {tuple(call.attention_mask.shape)}, not [B, T + n] = "
                                 f"[{call.input_ids.shape[0]}, {t + n}]")
            full = self.kinds[name].get("full")
            found, chains = [], None
            if full is not None:
                # the columns after the call, those still holding what the last call left not hashed again
                hashes = self.seal.hashes(self.history.hasher, name, cache, full, t, n) if cache is not None else None
                if t and (hashes is None or (not self.seal.held and bool((hashes == ABSENT).any()))):
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
            raise ValueError(f"watch could not read call #{number} of the {name} model: {what}") from error
        self.found(found)

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
        self.found(found)
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
