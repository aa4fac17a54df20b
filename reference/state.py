"""The batch state and the pure padding arithmetic (Spec §2, §4.4).

Padding is never inferred from a pad token id: models emit the pad id as
ordinary output and pad may equal EOS. Each row carries integer ``p_i``
(padding) and ``c_i`` (content length); the attention mask and the position
ids are derived from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .storage import StackedCache

#: Value written into padding slots of the token grid. It is never read as a
#: token: every consumer masks slots ``s < p_i``.
FILLER = 0


@dataclass
class BatchState:
    """One batch of left-padded rows between steps (Spec §2.1).

    ``tokens[i, p_i:]`` are the committed tokens (prompt + generated) of row
    ``i``; ``p_i + c_i = L`` for every row (invariant I1). Each cache holds
    ``L - 1`` slots at a round boundary: the newest token of each row has no
    key/value yet and leads the next verification input (Spec §2.3).
    """

    tokens: torch.Tensor  # [B, L] int64
    pad: torch.Tensor  # [B] int64, p_i
    length: torch.Tensor  # [B] int64, c_i
    requests: list[int]  # request (prompt) index of each row
    prompt_length: torch.Tensor  # [B] int64
    target_cache: StackedCache
    draft_cache: StackedCache | None
    round: int = 0

    @property
    def width(self) -> int:
        """``L``."""
        return self.tokens.shape[1]

    @property
    def batch(self) -> int:
        """``B``."""
        return self.tokens.shape[0]

    @property
    def generated(self) -> torch.Tensor:  # [B]
        """Tokens generated so far per row."""
        return self.length - self.prompt_length


def attention_mask(pad: torch.Tensor, width: int) -> torch.Tensor:
    """Mask ``[B, width]``: ``p_i`` zeros then ones (Spec §2.2)."""
    slots = torch.arange(width, device=pad.device)
    return (slots[None, :] >= pad[:, None]).long()


def content_index(pad: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Position ids ``[B, stop - start]`` of grid slots ``start..stop-1``: slot
    ``s`` of row ``i`` is content token ``s - p_i`` (clamped to 0 on padding),
    whatever the padding (Spec §2.2, invariant I2)."""
    slots = torch.arange(start, stop, device=pad.device)
    return (slots[None, :] - pad[:, None]).clamp(min=0)


def left_pad(prompts: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad prompts into ``(tokens [B, L], pad [B], length [B])`` (Spec §4.1)."""
    length = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    width = int(length.max())
    tokens = torch.full((len(prompts), width), FILLER, dtype=torch.long, device=device)
    for i, prompt in enumerate(prompts):
        tokens[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long, device=device)
    return tokens, width - length, length


@dataclass(frozen=True)
class Repad:
    """The update rule of Spec §4.4 for the rows that stay.

    ``L' = max_i (c_i + a_i)``, ``p'_i = L' - c_i - a_i``,
    ``δ_i = p'_i - p_i``.
    """

    rows: torch.Tensor  # [B'] kept row indices
    width: int  # L'
    pad: torch.Tensor  # [B'] p'_i
    length: torch.Tensor  # [B'] c_i + a_i
    delta: torch.Tensor  # [B'] δ_i
    dropped: bool  # some row left the batch
    realigns: bool  # some row left or some δ_i != 0; False: nothing needs to move (Spec §5.3:
    #              always the case at B = 1 or when all a_i are equal and every row stays)

    @property
    def slots(self) -> torch.Tensor:
        """``[B', L']``: the old (extended) grid slot that new slot ``s`` of kept
        row ``rows[b]`` comes from, ``s - δ_i`` (clamped to 0 on padding)."""
        slot = torch.arange(self.width, device=self.delta.device)
        return (slot[None, :] - self.delta[:, None]).clamp(min=0)


def repad(pad: torch.Tensor, length: torch.Tensor, a: torch.Tensor, keep: torch.Tensor) -> Repad:
    """Unpad–append–repad arithmetic for kept rows (Spec §4.4).

    ``pad``/``length``/``a`` are ``[B]`` (``a`` is ``a_i``, how many
    tokens each row commits this round), ``keep`` a ``[B]`` bool of rows
    that stay.
    """
    rows = keep.nonzero().flatten()
    new_length = (length + a)[rows]
    new_width = int(new_length.max()) if rows.numel() else 0
    new_pad = new_width - new_length
    delta = new_pad - pad[rows]
    dropped = rows.numel() < keep.numel()
    return Repad(rows, new_width, new_pad, new_length, delta, dropped, dropped or bool(delta.any()))


@dataclass
class RowOutput:
    """Tokens a request has generated, and why it stopped."""

    tokens: list[int] = field(default_factory=list)
    stop: str | None = None  # "eos" | "length"
