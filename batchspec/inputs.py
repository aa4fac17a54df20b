"""Prompts as a tokenizer hands them over: ``input_ids`` with an ``attention_mask``.

A batch from ``tokenizer(texts, padding=True, return_tensors="pt")`` is a
``[B, L]`` tensor whose padded slots hold the pad id, and a mask that says
which slots are the prompt's. batchspec's rows are the prompts alone (Spec
§2.1: a row's padding is state, never prompt), so the mask is read once here
and the pads are dropped, whichever side they are on. A tensor without a
mask is accepted only when it holds no pad id: treating pads as prompt
tokens would change the padded rows' outputs without an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

RIGHT_CALL = ("pass the tokenizer's mask: generate(target, draft, enc['input_ids'], "
              "attention_mask=enc['attention_mask'], ...), or generate(target, draft, enc, ...)")


@dataclass(frozen=True)
class Rows:
    """A padded batch read into prompts.

    Attributes:
        prompts: each row's prompt token ids, pads dropped, in row order.
        start: ``[B]`` the column of each row's first prompt token.
        length: ``[B]`` each row's prompt length.
    """

    prompts: list[list[int]]
    start: torch.Tensor  # [B]
    length: torch.Tensor  # [B]


def pad_id(model) -> int | None:
    """The pad id ``model`` declares (generation config first, then config), or None."""
    for config in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(config, "pad_token_id", None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def is_tensor_batch(prompts) -> bool:
    """True for what :func:`read_rows` reads: a tensor, or a mapping holding ``input_ids``."""
    return isinstance(prompts, torch.Tensor) or (isinstance(prompts, Mapping) and "input_ids" in prompts)


def read_rows(input_ids, attention_mask=None, pad: int | None = None) -> Rows:
    """The rows of ``input_ids`` ``[B, L]`` (or a mapping with ``input_ids`` and
    ``attention_mask``, as a tokenizer returns) under ``attention_mask``
    ``[B, L]`` of 0/1, each row's ones contiguous (left or right padding, or
    none). Without a mask every slot is a prompt token, refused when one holds
    ``pad``. One host transfer of the ids, whatever ``B``."""
    if isinstance(input_ids, Mapping):
        if attention_mask is not None:
            raise ValueError("attention_mask: given twice (in the mapping and as an argument); give it once")
        input_ids, attention_mask = input_ids["input_ids"], input_ids.get("attention_mask")
    ids = _ids(input_ids)
    if attention_mask is None:
        if pad is not None and bool((ids == pad).any()):
            raise ValueError(f"prompts: a tensor holding the pad id {pad} and no attention_mask, so pads would "
                             f"be read as prompt tokens; {RIGHT_CALL}")
        mask = torch.ones_like(ids)
    else:
        mask = _mask(attention_mask, ids)
    length = mask.sum(-1)  # [B]
    start = mask.argmax(-1)  # [B] first one
    slots = torch.arange(ids.shape[1], device=ids.device)
    inside = (slots >= start[:, None]) & (slots < (start + length)[:, None])  # [B, L]
    if bool((inside != mask.bool()).any()):
        row = int((inside != mask.bool()).any(-1).nonzero()[0])
        raise ValueError(f"attention_mask: row {row} has zeros between its ones; batchspec reads padding "
                         f"at one end of a row (left or right) only")
    empty = (length == 0).nonzero()
    if empty.numel():
        raise ValueError(f"attention_mask: row {int(empty[0])} has no prompt token (all zeros)")
    flat = ids.tolist()  # [B, L]: the one transfer to the host
    prompts = [row[s:s + n] for row, s, n in zip(flat, start.tolist(), length.tolist())]
    return Rows(prompts, start, length)


def _ids(input_ids) -> torch.Tensor:
    if not isinstance(input_ids, torch.Tensor):
        raise ValueError(f"input_ids must be a tensor [batch, length], got {type(input_ids).__name__}")
    if input_ids.dim() != 2:
        hint = " (one prompt? pass input_ids[None])" if input_ids.dim() == 1 else ""
        raise ValueError(f"input_ids must be 2-D [batch, length], got shape {tuple(input_ids.shape)}{hint}")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    return input_ids


def _mask(attention_mask, ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != ids.shape:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must be a tensor of input_ids' shape {tuple(ids.shape)}, got {shape}")
    mask = attention_mask.to(ids.device).long()
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("attention_mask must hold only 0 (pad) and 1 (prompt token)")
    return mask


def as_prompts(target, prompts, attention_mask=None):
    """``prompts`` as lists of ids: a tokenizer's padded batch is read with its
    mask (:func:`batchspec.inputs.read_rows`); lists pass through."""
    if is_tensor_batch(prompts):
        return read_rows(prompts, attention_mask, pad_id(target)).prompts
    if attention_mask is not None:
        raise ValueError("attention_mask applies to a tensor of input_ids; prompts given as lists have no padding")
    return prompts


def one_prompt(target, prompt, attention_mask=None):
    """``prompt`` as a list of ids; one tensor row is read with its mask (1-D ones are made ``[1, L]``)."""
    if isinstance(prompt, torch.Tensor) and prompt.dim() == 1:
        prompt = prompt[None]
        attention_mask = attention_mask[None] if isinstance(attention_mask, torch.Tensor) else attention_mask
    rows = as_prompts(target, prompt, attention_mask)
    if rows is prompt:
        return prompt
    if len(rows) != 1:
        raise ValueError(f"submit takes one prompt, got {len(rows)} rows; submit each: "
                         f"[scheduler.submit(ids, attention_mask=m) for ids, m in zip(enc['input_ids'], enc['attention_mask'])]")
    return rows[0]
