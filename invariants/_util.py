"""Helpers shared by the predicates."""

from __future__ import annotations

from .observation import Observation
from .violation import Violation


def reporter(obs: Observation, invariant: str, name: str):
    """A ``Violation`` factory pre-filled with the invariant and the step."""

    def report(row, expected, actual, detail, model=None) -> Violation:
        request = obs.requests[row] if (row is not None and obs.requests) else None
        return Violation(invariant, name, obs.round, obs.step, row, expected, actual, detail,
                         model, request)

    return report


def prefix_ones(mask_row) -> tuple[int, int]:
    """``(zeros, ones)`` if ``mask_row`` is zeros then ones, else ``(-1, -1)``."""
    values = [int(v) for v in mask_row.tolist()]
    zeros = 0
    while zeros < len(values) and values[zeros] == 0:
        zeros += 1
    if any(v != 1 for v in values[zeros:]):
        return -1, -1
    return zeros, len(values) - zeros

