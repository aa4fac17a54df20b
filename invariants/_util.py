"""Helpers shared by the predicates."""

from __future__ import annotations

import torch

from .observation import Observation
from .violation import Violation


def reporter(obs: Observation, invariant: str, name: str):
    """A ``Violation`` factory pre-filled with the invariant and the step."""

    def report(row, expected, actual, detail, model=None) -> Violation:
        request = obs.requests[row] if (row is not None and obs.requests) else None
        return Violation(invariant, name, obs.round, obs.step, row, expected, actual, detail,
                         model, request)

    return report


def leading_zeros(mask) -> list[int]:
    """Per row of ``mask`` ``[B, W]``: its count of leading zeros if the row is
    zeros then ones, else -1."""
    m = mask.long()
    zeros = (m.cumsum(1) == 0).sum(1)  # [B]
    shaped = ((m == 0) | (m == 1)).all(1) & (m.sum(1) + zeros == m.shape[1])  # [B]
    return torch.where(shaped, zeros, -1).tolist()
