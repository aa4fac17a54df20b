"""The decoders a user already has, run the way a user would run them:
transformers' batched greedy ``generate`` (left-padded), its assisted
generation (batch 1 only: it refuses larger batches), its continuous
batching (``generate_batch``), and the same ``generate`` call with batchspec's
``custom_generate`` folder (``custom_generate``: what an HF user types to get
EQSPEC at any batch size, so that the adapter's cost shows beside
``batchspec.generate``). Outputs come back as lists of new token ids,
cut after the first EOS, to be checked against the batch-1 reference."""

from __future__ import annotations

import torch

from ..reference.state import attention_mask, left_pad
from ..testing import cut_at_eos


def _greedy_kwargs(max_new_tokens: int, eos) -> dict:
    return dict(do_sample=False, max_new_tokens=max_new_tokens, min_new_tokens=0, eos_token_id=eos,
                pad_token_id=0 if eos is None else (eos if isinstance(eos, int) else eos[0]))


@torch.no_grad()
def hf_generate(target, prompts: list[list[int]], batch_size: int, max_new_tokens: int, eos) -> list[list[int]]:
    """``target.generate`` on successive left-padded batches of ``batch_size``."""
    out = []
    for first in range(0, len(prompts), batch_size):
        tokens, mask = _left_padded(prompts[first:first + batch_size], target.device)
        result = target.generate(input_ids=tokens, attention_mask=mask, **_greedy_kwargs(max_new_tokens, eos))
        out += [cut_at_eos(row[tokens.shape[1]:].tolist(), eos) for row in result]
    return out


def _left_padded(prompts: list[list[int]], device):
    """A tokenizer's left-padded batch: ``(input_ids, attention_mask)``, each ``[B, L]``."""
    tokens, pad, _ = left_pad(prompts, device)
    return tokens, attention_mask(pad, tokens.shape[1])


@torch.no_grad()
def hf_custom(target, draft, prompts: list[list[int]], batch_size: int, max_new_tokens: int, eos,
              policy) -> list[list[int]]:
    """``target.generate(**enc, assistant_model=draft, custom_generate=batchspec.hf.HUB,
    trust_remote_code=True)`` on successive left-padded batches of ``batch_size``,
    the draft policy given as transformers' assisted-generation settings: ``k_max``
    as ``num_assistant_tokens`` and a confident policy's ``threshold`` as
    ``assistant_confidence_threshold`` (0, a fixed ``k``)."""
    from ..hf import HUB

    settings = dict(num_assistant_tokens=policy.k_max, num_assistant_tokens_schedule="constant",
                    assistant_confidence_threshold=float(getattr(policy, "threshold", 0.0)))
    out = []
    for first in range(0, len(prompts), batch_size):
        tokens, mask = _left_padded(prompts[first:first + batch_size], target.device)
        result = target.generate(input_ids=tokens, attention_mask=mask, assistant_model=draft, custom_generate=HUB,
                                 trust_remote_code=True, **settings, **_greedy_kwargs(max_new_tokens, eos))
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
