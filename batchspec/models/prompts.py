"""Prompts that suit a pair's vocabulary: random ids for the tiny pairs, held-out
stdlib source for the embedded default pair, short texts through a tokenizer for
the others. The CLI (``--pair``) and the benchmarks take their prompts from here."""

from __future__ import annotations

import random

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
    from .default_pair import held_out_sample

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


def prompts_for(kind: str, tokenizer=None):
    """``(count, seed) -> prompts`` for a pair of registry ``kind`` (``"tiny"``,
    ``"embedded"``, or one with a ``tokenizer``)."""
    if kind == "tiny":
        return tiny_prompts
    if kind == "embedded":
        return default_prompts
    return lambda count, seed: text_prompts(tokenizer, count, seed)
