"""The pair and prompts ``batchspec demo`` runs: the embedded trained default
pair when it is installed, else the tiny Llama pair."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .testing import random_prompts


@dataclass
class DemoPair:
    name: str
    target: object
    draft: object
    prompts: list[list[int]]
    eos_token_id: int | None
    decode: Callable | None


def demo_pair(count: int) -> DemoPair:
    """The default demo pair with ``count`` prompts."""
    from .models import tiny

    target, draft = tiny.pair("llama", "perturbed")
    return DemoPair("tiny-llama (random weights, perturbed draft)", target, draft,
                    random_prompts(seed=11, count=count, low=3, high=24), None, None)
