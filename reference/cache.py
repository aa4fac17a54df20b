"""The one module that touches transformers' KV-cache API (Spec §2.3).

Everything else in batchspec sees a cache only through these functions. The
paper's own code died on a cache-API redesign; keeping the surface this small
is what lets the rest of the project survive the next one.

Tested against transformers 5.24 (see ``pyproject.toml`` for the range):

* the forward keyword is ``cache=`` (``past_key_values=`` warns, and is
  removed in 5.40) and outputs carry ``.cache``;
* ``DynamicCache.crop(n)`` takes a *negative* count of slots to drop;
* every layer exposes ``.keys`` / ``.values`` shaped ``[B, kv_heads, T, head_dim]``.

Attention must be SDPA. With ``attn_implementation="eager"`` in float64 and
left padding, transformers 5.24 produces NaN for Llama/Qwen: a pad query row
whose keys are all masked softmaxes over nothing, and the NaN then sits in the
cache's padding slots, where it poisons every later row (0 x NaN = NaN).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

__all__ = [
    "new_cache",
    "cache_length",
    "layer_tensors",
    "crop_to",
    "realign",
    "run_forward",
    "check_supported",
]


def new_cache(model) -> DynamicCache:
    """An empty dynamic cache for ``model``."""
    return DynamicCache(config=model.config)


def check_supported(model, name: str) -> None:
    """Raise ``ValueError`` when ``model`` cannot be run by batchspec (Spec §2.3)."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in (None, "sdpa"):
        raise ValueError(
            f"{name}: attn_implementation={impl!r} is not supported; load the model with "
            "attn_implementation='sdpa' (eager attention in float64 with left padding gives "
            "NaN in transformers 5.24: fully masked query rows)"
        )
    cache = new_cache(model)
    if any(getattr(layer, "is_sliding", False) for layer in cache.layers):
        raise ValueError(
            f"{name}: sliding-window cache layers are not supported (their slots are not the "
            "sequence positions that the realignment of Spec §4.5 moves)"
        )


def cache_length(cache: DynamicCache) -> int:
    """Number of slots ``T`` held by every layer (0 for an empty cache)."""
    return cache.get_seq_length()


def layer_tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer ``(keys, values)``, each ``[B, kv_heads, T, head_dim]`` (no copy)."""
    out = []
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False) and layer.keys is not None and layer.keys.numel():
            out.append((layer.keys, layer.values))
    return out


def crop_to(cache: DynamicCache, length: int) -> None:
    """Drop trailing slots so that ``length`` remain (no-op if already that long)."""
    extra = cache_length(cache) - length
    if extra < 0:
        raise ValueError(f"cannot crop a cache of {cache_length(cache)} slots to {length}")
    if extra:
        cache.crop(-extra)


def realign(cache: DynamicCache, rows: torch.Tensor, slots: torch.Tensor) -> None:
    """Move cache entries in place: new ``[b, :, s]`` = old ``[rows[b], :, slots[b, s]]``.

    One advanced-indexing gather per cache tensor and no Python loop over rows
    (Spec §4.5). ``rows``: ``[B']`` kept batch rows; ``slots``: ``[B', T']``.
    """
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False) or layer.keys is None or not layer.keys.numel():
            continue
        r = rows[:, None]  # [B', 1]
        # old[r, :, slots] -> [B', T', H, D]; back to [B', H, T', D]
        layer.keys = layer.keys[r, :, slots].transpose(1, 2)
        layer.values = layer.values[r, :, slots].transpose(1, 2)


def run_forward(model, cache, input_ids, attention_mask, position_ids, logits_to_keep: int = 0):
    """One forward call that extends ``cache`` by ``input_ids.shape[1]`` slots.

    ``input_ids``/``position_ids``: ``[B, n]``; ``attention_mask``: ``[B, T + n]``
    over cache slots then inputs. Returns logits ``[B, n or logits_to_keep, V]``.
    """
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=logits_to_keep,
    )
    return out.logits
