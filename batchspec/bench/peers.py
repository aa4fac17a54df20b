"""The decoders a user already has, run the way a user would run them:
transformers' batched greedy ``generate`` (left-padded), its assisted
generation (batch 1 only: it refuses larger batches) and its continuous
batching (``generate_batch``). Outputs come back as lists of new token ids,
cut after the first EOS, to be checked against the batch-1 reference."""

from __future__ import annotations

import torch

from ..reference.state import left_pad
from ..testing import cut_at_eos


def _greedy_kwargs(max_new_tokens: int, eos) -> dict:
    return dict(do_sample=False, max_new_tokens=max_new_tokens, min_new_tokens=0, eos_token_id=eos,
                pad_token_id=0 if eos is None else (eos if isinstance(eos, int) else eos[0]))


@torch.no_grad()
def hf_generate(target, prompts: list[list[int]], batch_size: int, max_new_tokens: int, eos) -> list[list[int]]:
    """``target.generate`` on successive left-padded batches of ``batch_size``."""
    out = []
    for first in range(0, len(prompts), batch_size):
        tokens, pad, _ = left_pad(prompts[first:first + batch_size], target.device)
        mask = (torch.arange(tokens.shape[1], device=target.device)[None, :] >= pad[:, None]).long()
        result = target.generate(input_ids=tokens, attention_mask=mask, **_greedy_kwargs(max_new_tokens, eos))
        out += [cut_at_eos(row[tokens.shape[1]:].tolist(), eos) for row in result]
    return out


@torch.no_grad()
def hf_assisted(target, draft, prompts: list[list[int]], max_new_tokens: int, eos) -> list[list[int]]:
    """Assisted generation (``assistant_model=draft``), one prompt at a time,
    with transformers' own draft-length schedule."""
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=target.device)
        result = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                                 **_greedy_kwargs(max_new_tokens, eos))
        out.append(cut_at_eos(result[0, len(prompt):].tolist(), eos))
    return out


@torch.no_grad()
def hf_continuous(target, prompts: list[list[int]], max_new_tokens: int, eos) -> list[list[int]]:
    """Continuous batching (``generate_batch``) over every prompt at once."""
    from transformers import GenerationConfig

    config = GenerationConfig(**_greedy_kwargs(max_new_tokens, eos))
    result = target.generate_batch(inputs=prompts, generation_config=config, progress_bar=False, warmup=False)
    by_request = sorted(result.values(), key=lambda r: int(str(r.request_id).rsplit("_", 1)[-1]))
    return [cut_at_eos(list(r.generated_tokens), eos) for r in by_request]
