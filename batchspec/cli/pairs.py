"""The model pairs the CLI runs (``--pair``), shared by ``demo``, ``compare``
and ``audit``: every pair of :data:`batchspec.models.registry.PAIRS`, plus
what a command needs beyond loading it — prompts that suit its vocabulary,
its EOS id and its default dtype."""

from __future__ import annotations

import torch

from ..models.prompts import TEXTS, default_prompts, text_prompts, tiny_prompts  # noqa: F401 (re-exported)
from ..models.registry import PAIRS  # noqa: F401 (re-exported: the one table of pairs)

DEFAULT_PAIR = "default"

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
