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


@torch.no_grad()
def reference_sampled(target, draft, prompt: list[int], max_new_tokens: int, key: tuple,
                      eos_token_id: int | list[int] | None = None, temperature: float = 1.0,
                      top_k: int | None = None, top_p: float | None = None) -> list[int]:
    """The per-position reference for speculative sampling (Spec §4.3.2, §5.5).

    The slow definition of a sampled request's output: at every position
    ``t`` both models run at batch 1 on the whole prefix, with no cache, and
    the rule decides ``x_t`` from their warped distributions and the uniforms
    keyed by ``(key, t)``. ``draft=None`` samples ``x_t ~ p_t`` (the
    autoregressive method). ``key`` is the request's key as ``generate``
    derives it from ``seed``: ``(seed, r)`` for an int seed, ``(seed[r], 0)``
    for one per prompt.
    """
    from .reference.sampling import Sampler, Warping, decide

    sampler = Sampler(Warping(temperature, top_k, top_p), {0: key})
    ids = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())
    sequence, out = list(prompt), []
    while len(out) < max_new_tokens and not (out and out[-1] in ids):
        t = len(sequence)
        prefix = torch.tensor([sequence], dtype=torch.long, device=target.device)
        p = sampler.p(target(input_ids=prefix, use_cache=False).logits[:, -1])  # [1, V]
        q = y = None
        if draft is not None:
            q = sampler.q(draft(input_ids=prefix, use_cache=False).logits[:, -1])
            y = sampler.propose(q, sampler.u([0], [t], "draft", q))
        _, token = decide(sampler, p, q, y, [0], [t])
        sequence.append(int(token[0]))
        out.append(int(token[0]))
    return out
