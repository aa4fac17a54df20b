"""The pair and prompts ``batchspec demo`` runs: the embedded trained default
pair (byte-level Llamas trained on the Python standard library), prompted with
held-out stdlib source of varied lengths so that the batch turns ragged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass
class DemoPair:
    """A pair, its prompts, and how to show tokens as text."""

    name: str
    target: PreTrainedModel
    draft: PreTrainedModel
    prompts: list[list[int]]
    eos_token_id: int | None
    decode: Callable | None


def demo_prompts(count: int) -> list[list[int]]:
    """``count`` held-out stdlib prompts of 24 to 96 bytes: ragged from the first round."""
    from .models.default_pair import held_out_sample

    windows = held_out_sample()  # [64, 256]
    return [windows[(5 * i) % windows.shape[0]][: 24 + (37 * i) % 73].tolist() for i in range(count)]


def demo_pair(count: int, dtype: torch.dtype = torch.float64) -> DemoPair:
    """The default pair with ``count`` held-out prompts (:func:`demo_prompts`).

    float64 by default: the demo's "exact" column is a claim about the
    algorithm, which float64 keeps free of rounding ties (Spec §5.2).
    """
    from .models import bytes as text
    from .models.default_pair import load_default_pair

    target, draft = load_default_pair(dtype)
    return DemoPair("default (byte-level Llamas trained on the stdlib: 12-layer target, 1-layer draft)",
                    target, draft, demo_prompts(count), text.EOS_TOKEN_ID, text.decode)
