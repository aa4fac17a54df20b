"""``batchspec.generate``: the public entry point.

Methods are registered in :mod:`batchspec.methods`; their decoders run under :mod:`batchspec.driver`, which times the
steps and checks the invariants (style §7).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .driver import checks, drive
from .methods import METHODS, DecodeConfig, Method, register_method  # noqa: F401 (re-exported)
from .reference import Models
from .stats import Stats
from .validate import validate


@dataclass
class GenerationResult:
    """Outputs in input order, stop reasons, statistics, recorded violations."""

    sequences: list[list[int]]
    stats: Stats
    stop_reasons: list[str] = field(default_factory=list)
    violations: list = field(default_factory=list)


def generate(target, draft, prompts, method="eqspec", num_draft_tokens=5, max_new_tokens=32,
             batch_size=None, eos_token_id=None, check_invariants=False, window_size=None,
             sort_by_length=True) -> GenerationResult:
    """Decode ``prompts`` (lists of token ids) with ``method`` (Spec §4).

    Greedy output equals, token for token, the target's own batch-1 greedy
    ``generate`` of each prompt, cut after the first EOS. ``check_invariants``:
    ``False``; ``True`` (raise :class:`InvariantViolation` at the first
    violation: I1–I7, cache contents by provenance fingerprints);
    ``"structural"`` (I1–I5 only, no history); ``"semantic"`` (also recompute
    every cached key/value with a fresh forward); ``"record"`` (the checks of
    ``True``, every violation collected in ``result.violations``, run to the end). ``window_size`` and
    ``sort_by_length`` apply to ``method="exspec"``.
    """
    eos = validate(target, draft, prompts, method, METHODS, num_draft_tokens, max_new_tokens,
                   batch_size, eos_token_id, check_invariants)
    spec = METHODS[method]
    models = Models(target, draft if spec.needs_draft else None)
    config = DecodeConfig(
        k=num_draft_tokens, max_new_tokens=max_new_tokens,
        eos=torch.tensor(eos, dtype=torch.long, device=target.device) if eos else None,
        batch_size=batch_size or max(len(prompts), 1), window_size=window_size,
        sort_by_length=sort_by_length)
    oracle, ledger = checks(check_invariants, target, draft)
    stats, found, outputs = Stats(method), [], {}
    start = time.perf_counter()
    with torch.no_grad():
        for decoder in spec.decoders(models, prompts, config):
            outputs.update(drive(decoder, stats, check_invariants, oracle, found, target.device, ledger))
    stats.wall_seconds = time.perf_counter() - start
    sequences = [outputs[r].tokens for r in range(len(prompts))]
    stats.generated_tokens = sum(map(len, sequences))
    return GenerationResult(sequences, stats, [outputs[r].stop for r in range(len(prompts))], found)
