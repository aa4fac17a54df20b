"""The driver around the algorithm: it resumes a decoder generator (Spec §4),
times each step from outside it, counts the calls, and checks the invariants
on every event (Contributing §4.7: the algorithm itself never times or prints).

Both :func:`batchspec.generate` and the online :class:`batchspec.scheduler.Scheduler`
drive their decoders through :func:`drive`.
"""

from __future__ import annotations

import time

import torch

from .invariants import InvariantViolation, Ledger, violations
from .invariants.memo import Memo
from .oracle import hf_oracle
from .reference import observation
from .stats import Stats


def clock(device) -> float:
    """Seconds, after waiting for ``device``'s queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def checks(mode, target, draft) -> tuple:
    """``(oracle, ledger)`` for ``generate``'s ``check_invariants`` ``mode``: the
    ledger (I6, I7) in every mode but ``"structural"``, the oracle (semantic
    I3) in ``"semantic"``. One pair per run: the ledger follows requests
    across batches and rounds."""
    oracle = hf_oracle({"target": target, "draft": draft}) if mode == "semantic" else None
    return oracle, (Ledger() if mode and mode != "structural" else None)


def drive(decoder, stats: Stats, mode, oracle, found: list, device, ledger=None) -> dict:
    """Run one batch's decoder to the end, timing each step and checking invariants.

    ``mode`` is ``generate``'s ``check_invariants``; violations go to ``found``
    (``"record"``) or raise :class:`InvariantViolation` at the first one;
    ``oracle`` and ``ledger`` come from :func:`checks` (a caller that passes
    no ledger gets one for this decoder alone: I6/I7 are never dropped silently).
    Returns the decoder's ``{request: RowOutput}``.
    """
    if ledger is None and mode and mode != "structural":
        ledger = Ledger()
    memo = Memo()  # what the checks build once for this decoder (a round's masks)
    tick = clock(device)
    while True:
        try:
            event = next(decoder)
        except StopIteration as stop:
            stats.phase_seconds["other"] += clock(device) - tick
            return stop.value
        stats.phase_seconds[event.phase] += clock(device) - tick
        for call in event.calls:
            if call.model == "target":
                stats.target_calls += 1
            else:
                stats.draft_calls += 1
        if event.record is not None:
            stats.rounds += 1
            stats.realignments += event.record.realigned
            stats.per_round.append(event.record)
        if mode and event.state.batch:
            check_start = time.perf_counter()
            new = violations(observation(event, memo), oracle, ledger=ledger, memo=memo)
            if new and mode != "record":
                raise InvariantViolation(new[0], tuple(new[1:]))
            found.extend(new)
            stats.check_seconds += time.perf_counter() - check_start
        tick = clock(device)


def clocked(decoder, device):
    """Re-yield ``decoder``'s events and stamp on each round record the
    seconds the algorithm spent in that round, measured as :func:`drive`
    measures its phases (from resuming the decoder to its next event), so the
    invariant checks made between events are not counted."""
    spent = 0.0
    while True:
        start = clock(device)
        try:
            event = next(decoder)
        except StopIteration as stop:
            return stop.value
        spent += clock(device) - start
        if event.record is not None:
            event.record.seconds, spent = spent, 0.0
        yield event
