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
from .reference.baselines import BASELINES
from .stats import Stats
from .validate import validate


@dataclass(frozen=True)
class DecodeConfig:
    """Everything a method needs besides the models and the prompts."""

    k: int  # num_draft_tokens
    max_new_tokens: int
    eos: torch.Tensor | None  # [E] EOS ids, or None
    batch_size: int
    window_size: int | None = None  # EXSPEC
    sort_by_length: bool = True  # EXSPEC


@dataclass(frozen=True)
class Method:
    """A decoding method: ``decoders(models, prompts, config)`` yields one
    decoder generator (Spec §4) per batch it forms; each returns
    ``{request: RowOutput}``."""

    decoders: Callable
    needs_draft: bool


def static_batches(run):
    """Split the prompts into successive batches of ``config.batch_size``."""

    def decoders(models, prompts, config):
        for first in range(0, len(prompts), config.batch_size):
            requests = list(range(first, min(first + config.batch_size, len(prompts))))
            yield run(models, [list(prompts[r]) for r in requests], requests, config)

    return decoders


def _eqspec(models, prompts, requests, config):
    return decode(models, prompts, requests, config.k, config.max_new_tokens, config.eos)


def _autoregressive(models, prompts, requests, config):
    return decode(Models(models.target), prompts, requests, 0, config.max_new_tokens, config.eos)


#: Registry of methods; later modules add theirs with :func:`register_method`.
METHODS: dict[str, Method] = {
    "eqspec": Method(static_batches(_eqspec), True),
    "autoregressive": Method(static_batches(_autoregressive), False),
}


def register_method(name: str, method: Method) -> None:
    """Make ``method`` available as ``generate(..., method=name)``."""
    METHODS[name] = method


for _name, _run in BASELINES.items():  # the broken alternatives, paper notes §5
    register_method(_name, Method(static_batches(_run), True))


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
    violation, structural checks); ``"semantic"`` (also recompute every cached
    key/value with a fresh forward); ``"record"`` (collect every violation in
    ``result.violations`` and run to the end). ``window_size`` and
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
    oracle = hf_oracle({"target": target, "draft": draft}) if check_invariants == "semantic" else None
    stats, found, outputs = Stats(method), [], {}
    start = time.perf_counter()
    with torch.no_grad():
        for decoder in spec.decoders(models, prompts, config):
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


# EXSPEC builds on the driver above (batchspec/scheduler.py imports it), so it registers last.
from .scheduler import EXSPEC  # noqa: E402

register_method("exspec", EXSPEC)
