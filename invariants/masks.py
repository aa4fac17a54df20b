"""A 4-D attention mask read back as the row mask it expands (Spec §2.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .memo import Memo


def causal(n: int, width: int, device) -> torch.Tensor:
    """``[n, width]``: input ``j`` of ``n`` (the last ``n`` slots) sees slots ``<= width - n + j``
    (a :class:`Memo` keeps it)."""
    slots = torch.arange(width, device=device)
    return slots[None, :] <= slots[width - n:, None]


def key_mask(mask: torch.Tensor, name: str, memo: Memo | None = None, width: int | None = None) -> torch.Tensor:
    """A ``[B, 1, n, T + n]`` attention mask (boolean, or additive: 0 where
    attended) read as the ``[B, T + n]`` mask it expands (Spec §2.4): its
    last input's row, which in a causal mask sees every slot the row
    attends. A 4D mask that is not that row made causal among the inputs
    (per head, or not causal) has no one mask per row to check against the
    grid, and is refused with ``ValueError``. ``width``: the ``T + n`` columns
    of the stream; a static cache's mask spans its preallocated slots too,
    which must be masked, and are cut off."""
    seen = mask if mask.dtype == torch.bool else mask == 0
    if width is not None and seen.shape[-1] > width:
        if bool(seen[..., width:].any()):
            raise ValueError(f"watch: the {name} model was given a 4D attention mask {tuple(mask.shape)} that "
                             f"attends slots beyond the {width} its cache has written")
        seen = seen[..., :width]
    n, width = seen.shape[2], seen.shape[3]
    if seen.shape[1] == 1 and n == 1:  # one input: its row is the mask, and sees every slot it attends
        return seen.flatten(1).long()
    rows = seen[:, 0, -1, :]  # [B, T + n]
    made_causal = causal(n, width, mask.device) if memo is None else memo.causal(n, width, mask.device)  # [n, T + n]
    if seen.shape[1] != 1 or not torch.equal(seen[:, 0], rows[:, None, :] & made_causal):
        raise ValueError(f"watch: the {name} model was given a 4D attention mask {tuple(mask.shape)} that "
                         "is not one row mask per sequence made causal over the inputs; pass the "
                         "[B, T + n] mask, or that expansion of it")
    return rows.long()
