"""``batchspec.generate``: the public entry point.

Methods are registered in :mod:`batchspec.methods`; their decoders run under :mod:`batchspec.driver`, which times the
steps and checks the invariants (style §7).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .oracle import hf_oracle
from .driver import drive
from .methods import METHODS, DecodeConfig, Method, register_method  # noqa: F401 (re-exported)
from .reference import Models
from .reference.sampling import Sampler, Warping
from .stats import Stats
from .validate import validate, validate_sampling


@dataclass
class GenerationResult:
    """Outputs in input order, stop reasons, statistics, recorded violations."""

    sequences: list[list[int]]
    stats: Stats
    stop_reasons: list[str] = field(default_factory=list)
    violations: list = field(default_factory=list)


def generate(target, draft, prompts, method="eqspec", num_draft_tokens=5, max_new_tokens=32,
             batch_size=None, eos_token_id=None, check_invariants=False, window_size=None,
             sort_by_length=True, do_sample=False, temperature=1.0, top_k=None, top_p=None,
             seed=0) -> GenerationResult:
    """Decode ``prompts`` (lists of token ids) with ``method`` (Spec §4).

    Greedy output equals, token for token, the target's own batch-1 greedy
    ``generate`` of each prompt, cut after the first EOS. ``check_invariants``:
    ``False``; ``True`` (raise :class:`InvariantViolation` at the first
    violation, structural checks); ``"semantic"`` (also recompute every cached
    key/value with a fresh forward); ``"record"`` (collect every violation in
    ``result.violations`` and run to the end). ``window_size`` and
    ``sort_by_length`` apply to ``method="exspec"``.

    ``do_sample=True`` (eqspec, exspec, autoregressive) samples from the
    target warped by ``temperature``, ``top_k`` and ``top_p`` (transformers'
    warpers, applied to both models) with speculative sampling (Spec §4.3.2):
    each request's output is a deterministic function of its prompt and its
    key (``seed`` an int, or one per prompt), the same at every batch size,
    ``k``, method and window, and distributed as the warped target's
    sampling (Spec §5.5).
    """
    sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    eos = validate(target, draft, prompts, method, METHODS, num_draft_tokens, max_new_tokens,
                   batch_size, eos_token_id, check_invariants, sampling)
    keys = validate_sampling(method, METHODS, prompts=prompts, **sampling)
    spec = METHODS[method]
    models = Models(target, draft if spec.needs_draft else None)
    config = DecodeConfig(
        k=num_draft_tokens, max_new_tokens=max_new_tokens,
        eos=torch.tensor(eos, dtype=torch.long, device=target.device) if eos else None,
        batch_size=batch_size or max(len(prompts), 1), window_size=window_size,
        sort_by_length=sort_by_length,
        sampler=None if keys is None else Sampler(Warping(float(temperature), top_k, top_p), dict(enumerate(keys))))
    oracle = hf_oracle({"target": target, "draft": draft}) if check_invariants == "semantic" else None
    stats, found, outputs = Stats(method), [], {}
    start = time.perf_counter()
    with torch.no_grad():
        for decoder in spec.decoders(models, prompts, config):
            outputs.update(drive(decoder, stats, check_invariants, oracle, found, target.device))
    stats.wall_seconds = time.perf_counter() - start
    sequences = [outputs[r].tokens for r in range(len(prompts))]
    stats.generated_tokens = sum(map(len, sequences))
    return GenerationResult(sequences, stats, [outputs[r].stop for r in range(len(prompts))], found)
