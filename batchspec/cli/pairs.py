"""The model pairs the CLI runs (``--pair``): the one place they are chosen,
shared by ``compare``, ``audit`` and ``demo``."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class PairChoice:
    """A model pair the CLI can run: ``load(dtype) -> (target, draft)`` and
    ``prompts(count, seed) -> [[token ids]]`` that suit its vocabulary."""

    description: str
    load: Callable
    prompts: Callable
    dtype: torch.dtype


def _tiny(family: str) -> PairChoice:
    def load(dtype):
        from ..models import tiny

        return tiny.pair(family, "perturbed", dtype=dtype)

    def prompts(count, seed):
        rng = random.Random(seed)  # ids 2.. : 0 is the pad id and 1 the EOS id of the tiny configs
        return [[rng.randrange(2, 96) for _ in range(rng.randint(2, 12))] for _ in range(count)]

    return PairChoice(f"random tiny {family} target, perturbed draft (float64)", load, prompts, torch.float64)


def _default() -> PairChoice:
    def load(dtype):
        from ..models.default_pair import load_default_pair

        return load_default_pair(dtype)

    def prompts(count, seed):
        from ..models.default_pair import held_out_sample

        rng = random.Random(seed)  # held-out stdlib source, 16 to 64 bytes
        windows = held_out_sample()
        return [windows[rng.randrange(windows.shape[0])][: rng.randint(16, 64)].tolist() for _ in range(count)]

    return PairChoice("the embedded default pair: byte-level Llamas trained on the stdlib (float64)",
                      load, prompts, torch.float64)


#: name -> pair; the one place the CLI's pairs are chosen.
PAIRS: dict[str, PairChoice] = {"default": _default(),
                                **{f"tiny-{f}": _tiny(f) for f in ("llama", "qwen3", "glm4")}}
DEFAULT_PAIR = "default"
