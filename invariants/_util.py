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


def on(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` on ``device``: itself when it is there already (no dispatch in
    the common case, where the grid, the calls and the caches share one device)."""
    return tensor if tensor.device == device else tensor.to(device)


_MASKS: dict = {}  # (p_i..., device, dtype) -> the widest mask built for them


def compact_mask(pad: list[int], width: int, device, dtype=torch.bool) -> torch.Tensor:
    """``[B, width]``: row ``i`` is ``pad[i]`` zeros then ones (Spec §2.2).

    Kept by value, a few at a time: every step between two boundaries has the
    same ``p_i`` and widths that grow by a slot or two, so the mask is built
    once per round (wider than asked, then sliced). Shared: read it, never
    write into it.
    """
    key = (tuple(pad), device, dtype)
    mask = _MASKS.get(key)
    if mask is None or mask.shape[1] < width:
        if len(_MASKS) >= 8:
            _MASKS.clear()
        slots = torch.arange(width + 16, device=device)
        mask = _MASKS[key] = (slots[None, :] >= torch.tensor(pad, device=device)[:, None]).to(dtype)
    return mask[:, :width]


_EXTENDED: list = [None]  # (a copy of the grid mask, need, device, dtype, the widest extension built)


def extended_mask(grid: torch.Tensor, need: int, width: int, device, dtype) -> torch.Tensor:
    """``[B, width]``: the grid mask's first ``need`` slots, then ones: the mask a
    call over ``need`` committed slots and ``width - need`` newer ones must pass
    (Spec §3.4; ``grid`` has at least ``need`` slots), on the call's ``device``, in the wider of the grid's and the
    call's ``dtype`` (nothing is rounded).

    Kept while the grid mask holds the same values as the copy taken when it
    was built (one comparison, whatever wrote into the grid in between): a
    decoder that holds one mask per round builds this once per round, wider
    than asked, then slices it. Shared: read it, never write into it.
    """
    dtype = torch.promote_types(grid.dtype, dtype)
    held = _EXTENDED[0]
    if (held is None or held[1:4] != (need, device, dtype) or held[4].shape[1] < width
            or held[0].shape != grid.shape or held[0].device != grid.device or not torch.equal(held[0], grid)):
        ones = torch.ones((grid.shape[0], width - need + 16), dtype=dtype, device=device)
        held = _EXTENDED[0] = (grid.clone(), need, device, dtype,
                               torch.cat((on(grid[:, :need], device).to(dtype), ones), 1))
    return held[4] if held[4].shape[1] == width else held[4][:, :width]
