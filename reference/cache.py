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
    "stack",
    "split",
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


def stack(model, rows: list[list], pad: list[int]) -> DynamicCache:
    """One batch cache from per-sequence tensors (EXSPEC, Spec §8.3).

    ``rows[b]`` is one sequence's cache as :func:`layer_tensors` gives it (per
    layer ``(keys, values)`` ``[1, H, T_b, D]``; ``[]`` when nothing is cached
    yet). Row ``b`` of the result is ``pad[b]`` zero slots, then its slots;
    the caller chooses ``pad[b] = T - T_b``. With every ``pad[b] = 0`` (a
    same-length group) it is one ``torch.cat`` per tensor: no padding, no
    shift. Otherwise it is the fallback realignment: one zeroed ``[B, H, T,
    D]`` tensor per cache tensor and one copy per row into slots ``pad[b]
    ..``. Padding slots are masked; zeros keep them finite (I3).
    """
    cache = new_cache(model)
    template = next((r for r in rows if r), None)
    if template is None:  # nothing cached in any row
        return cache
    width = max(p + (r[0][0].shape[2] if r else 0) for p, r in zip(pad, rows))
    for layer, (target, pair) in enumerate(zip(cache.layers, template)):
        out = []
        for kind, ref in enumerate(pair):
            if not any(pad):
                out.append(torch.cat([r[layer][kind] for r in rows], dim=0))
                continue
            full = ref.new_zeros((len(rows), ref.shape[1], width, ref.shape[3]))  # [B, H, T, D]
            for b, (p, r) in enumerate(zip(pad, rows)):
                if r:
                    full[b, :, p:] = r[layer][kind][0]
            out.append(full)
        target.update(out[0][..., :0, :], out[1][..., :0, :])  # initialise through the public path
        target.keys, target.values = out
    return cache


def split(cache: DynamicCache, spans: list[tuple[int, int, int]]) -> list[list]:
    """Per-sequence tensors, one per span ``(row, start, stop)``: slots
    ``start .. stop-1`` of batch row ``row``, in :func:`layer_tensors`' form
    (``[]`` for an empty span; EXSPEC, Spec §8.3). Copies: a view would keep
    the whole batch's tensors (every row, every speculative slot) alive for
    as long as one of its sequences waits in the pool."""
    tensors = layer_tensors(cache)
    return [[(k[row:row + 1, :, start:stop].clone(), v[row:row + 1, :, start:stop].clone())
             for k, v in tensors] if stop > start else [] for row, start, stop in spans]


@torch.no_grad()
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
