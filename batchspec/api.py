"""``batchspec.generate``: the public entry point and the driver around the algorithm.

The driver times each step from outside the algorithm and checks the
invariants on every event (style §7); the algorithm itself never times or
prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .invariants import InvariantViolation, violations
from .oracle import hf_oracle
from .reference import Models, decode, observation
from .stats import Stats
from .validate import validate


@dataclass(frozen=True)
class Method:
    """A decoding method: how to build its decoder for one batch."""

    run: Callable  # (models, prompts, requests, k, max_new_tokens, eos) -> Decoder
    needs_draft: bool


METHODS: dict[str, Method] = {
    "eqspec": Method(lambda m, p, r, k, n, e: decode(m, p, r, k, n, e), True),
    "autoregressive": Method(lambda m, p, r, k, n, e: decode(Models(m.target), p, r, 0, n, e), False),
}


@dataclass
class GenerationResult:
    """Outputs in input order, stop reasons, statistics, recorded violations."""

    sequences: list[list[int]]
    stats: Stats
    stop_reasons: list[str] = field(default_factory=list)
    violations: list = field(default_factory=list)


def generate(target, draft, prompts, method="eqspec", num_draft_tokens=5, max_new_tokens=32,
             batch_size=None, eos_token_id=None, check_invariants=False) -> GenerationResult:
    """Decode ``prompts`` (lists of token ids) with ``method`` (Spec §4).

    Greedy output equals, token for token, the target's own batch-1 greedy
    ``generate`` of each prompt, cut after the first EOS. ``check_invariants``:
    ``False``; ``True`` (raise :class:`InvariantViolation` at the first
    violation, structural checks); ``"semantic"`` (also recompute every cached
    key/value with a fresh forward); ``"record"`` (collect every violation in
    ``result.violations`` and run to the end).
    """
    eos = validate(target, draft, prompts, method, METHODS, num_draft_tokens, max_new_tokens,
                   batch_size, eos_token_id, check_invariants)
    spec = METHODS[method]
    models = Models(target, draft if spec.needs_draft else None)
    eos_t = torch.tensor(eos, dtype=torch.long, device=target.device) if eos else None
    oracle = None
    if check_invariants == "semantic":
        oracle = hf_oracle({"target": target, "draft": draft})
    stats, found = Stats(method), []
    outputs = {}
    size = batch_size or max(len(prompts), 1)
    start = time.perf_counter()
    with torch.no_grad():
        for first in range(0, len(prompts), size):
            requests = list(range(first, min(first + size, len(prompts))))
            decoder = spec.run(models, [list(prompts[r]) for r in requests], requests,
                               num_draft_tokens, max_new_tokens, eos_t)
            outputs.update(_drive(decoder, stats, check_invariants, oracle, found, target.device))
    stats.wall_seconds = time.perf_counter() - start
    sequences = [outputs[r].tokens for r in range(len(prompts))]
    stats.generated_tokens = sum(map(len, sequences))
    return GenerationResult(sequences, stats, [outputs[r].stop for r in range(len(prompts))], found)


def _clock(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _drive(decoder, stats: Stats, mode, oracle, found: list, device) -> dict:
    """Run one batch's decoder to the end, timing each step and checking invariants."""
    tick = _clock(device)
    while True:
        try:
            event = next(decoder)
        except StopIteration as stop:
            stats.phase_seconds["other"] += _clock(device) - tick
            return stop.value
        stats.phase_seconds[event.phase] += _clock(device) - tick
        for call in event.calls:
            if call.model == "target":
                stats.target_calls += 1
            else:
                stats.draft_calls += 1
        if event.record is not None:
            stats.rounds += 1
            stats.realignments += event.record.moved
            stats.per_round.append(event.record)
        if mode and event.state.batch:
            check_start = time.perf_counter()
            new = violations(observation(event), oracle)
            if new and mode != "record":
                raise InvariantViolation(new[0], tuple(new[1:]))
            found.extend(new)
            stats.check_seconds += time.perf_counter() - check_start
        tick = _clock(device)
