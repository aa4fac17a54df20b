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


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """A predicate's statement on whole tensors: ``got`` equals ``want`` (read on
    ``got``'s device), shape and values, in one comparison."""
    return torch.equal(got, on(want, got.device))


def where_wrong(wrong: torch.Tensor) -> list[tuple[int, int]]:
    """``(row, j)`` for each row of ``wrong`` (``[B]`` or ``[B, n, ...]`` bool) that
    holds a True, ``j`` its first along the second dimension (0 for ``[B]``).

    The shared start of every explanation: a predicate states its invariant
    on whole tensors, and only when the statement is false does it ask where,
    then say expected against actual for each row found."""
    if wrong.numel() == 0:
        return []
    wrong = wrong.reshape(wrong.shape[0], wrong.shape[1] if wrong.dim() > 1 else 1, -1).any(2)  # [B, n]
    first = wrong.long().argmax(1).tolist()  # the first True: argmax returns the first maximum
    return [(i, first[i]) for i in wrong.any(1).nonzero().flatten().tolist()]


def like(tensor: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``tensor.to(other)``: itself, with no dispatch, when its dtype and device are ``other``'s already."""
    return tensor if tensor.dtype == other.dtype and tensor.device == other.device else tensor.to(other)


def on(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` on ``device``: itself when it is there already (no dispatch in
    the common case, where the grid, the calls and the caches share one device)."""
    return tensor if tensor.device == device else tensor.to(device)


def from_newest(obs, call) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(inputs [B, n], logits [B, n, V] or what there is)`` of a verification
    call from the newest committed token on (Spec §3.5): a call over a cache
    shorter than ``L - 1`` (a prefill that fed nothing, Spec §4.1) fed the committed
    slots it lacked before it, and may keep logits for the last inputs only."""
    o = max(obs.width - 1 - call.cache_length, 0)
    inputs = call.input_ids[:, o:]
    n, logits = inputs.shape[1], call.logits
    if logits is not None and logits.shape[1] >= n:
        logits = logits[:, logits.shape[1] - n:]
    return inputs, logits
