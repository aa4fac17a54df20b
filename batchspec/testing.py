"""Helpers for checking a decoder against the target's own batch-1 greedy output.

Usable in any project's CI: ``reference_greedy`` is the definition of
correctness for greedy decoding (Spec §5.2).
"""

from __future__ import annotations

import random

import torch


def cut_at_eos(tokens: list[int], eos: int | list[int] | None) -> list[int]:
    """``tokens`` up to and including the first EOS."""
    if eos is None:
        return list(tokens)
    ids = {eos} if isinstance(eos, int) else set(eos)
    for i, t in enumerate(tokens):
        if t in ids:
            return list(tokens[: i + 1])
    return list(tokens)


@torch.no_grad()
def reference_greedy(target, prompt: list[int], max_new_tokens: int,
                     eos_token_id: int | list[int] | None = None) -> list[int]:
    """New tokens of ``target.generate`` at batch 1, greedy, cut after the first EOS."""
    if max_new_tokens == 0:
        return []
    ids = torch.tensor([prompt], dtype=torch.long, device=target.device)
    out = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                          pad_token_id=0, min_new_tokens=0)
    return cut_at_eos(out[0, len(prompt):].tolist(), eos_token_id)


def random_prompts(seed: int, count: int, low: int = 1, high: int = 40, vocab: int = 96,
                   first_id: int = 2) -> list[list[int]]:
    """``count`` prompts of lengths ``low..high`` over ids ``first_id..vocab-1``, deterministic."""
    rng = random.Random(seed)
    return [[rng.randrange(first_id, vocab) for _ in range(rng.randint(low, high))] for _ in range(count)]
