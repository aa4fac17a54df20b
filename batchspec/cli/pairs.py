"""The model pairs the CLI runs (``--pair``), shared by ``demo``, ``compare``
and ``audit``: every pair of :data:`batchspec.models.registry.PAIRS`, plus
what a command needs beyond loading it — prompts that suit its vocabulary,
its EOS id and its default dtype."""

from __future__ import annotations

import random

import torch

from ..models.registry import PAIRS  # noqa: F401 (re-exported: the one table of pairs)

DEFAULT_PAIR = "default"

#: Short texts for pairs with a tokenizer; a seed picks and cuts them so the batch turns ragged.
TEXTS = (
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "import os\n\nfor root, dirs, files in os.walk('.'):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "The capital of France is",
    "Speculative decoding lets a small draft model propose tokens that",
    "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n",
    "# Read a CSV file and print the sum of its second column\nimport csv\n",
    "Once upon a time, in a small village by the sea,",
)


def tiny_prompts(count: int, seed: int) -> list[list[int]]:
    """Random ids 2..95 (0 is the pad id and 1 the EOS id of the tiny configs), 2 to 12 long."""
    rng = random.Random(seed)
    return [[rng.randrange(2, 96) for _ in range(rng.randint(2, 12))] for _ in range(count)]


def default_prompts(count: int, seed: int) -> list[list[int]]:
    """Held-out stdlib source (never trained on), 16 to 64 bytes."""
    from ..models.default_pair import held_out_sample

    rng = random.Random(seed)
    windows = held_out_sample()  # [64, 256]
    return [windows[rng.randrange(windows.shape[0])][: rng.randint(16, 64)].tolist() for _ in range(count)]


def text_prompts(tokenizer, count: int, seed: int) -> list[list[int]]:
    """:data:`TEXTS` through ``tokenizer``, each cut to a random prefix of at least 4 tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ids = tokenizer.encode(rng.choice(TEXTS), add_special_tokens=False)
        out.append(ids[: rng.randint(min(4, len(ids)), len(ids))])
    return out


def default_dtype(name: str) -> torch.dtype | None:
    """float64 for the tiny and the embedded pair (their "exact" is a claim about the
    algorithm, free of rounding ties, Spec §5.2); the registry's choice for the others."""
    return torch.float64 if PAIRS[name].kind in ("tiny", "embedded") else None


def eos_token_id(name: str, target, tokenizer) -> int | None:
    """The EOS id a command passes to ``generate``: none for the tiny pairs (random
    tokens, an EOS would end rows at random) and the byte pair (it has none)."""
    if PAIRS[name].kind in ("tiny", "embedded"):
        return None
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        return int(tokenizer.eos_token_id)
    eos = getattr(target.generation_config, "eos_token_id", None)
    return eos if isinstance(eos, (int, list)) and eos != [] else None
