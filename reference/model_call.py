"""The forward adapter: one model call that extends a cache (Spec §2.4).

Every forward call of a decoder in ``reference/`` goes through
:func:`run_forward`, the one place there where transformers' model-call API
is touched: the keyword ``cache=`` (``past_key_values=`` warns in
transformers 5.24 and is removed in 5.40), ``logits_to_keep``, the outputs'
``.logits``, and the 4-D mask the model's attention takes as it is.
transformers' cache classes are imported by :mod:`.storage` alone; this
module passes the cache through.
"""

from __future__ import annotations

import torch

from .storage import cache_length

__all__ = ["expanded_mask", "run_forward"]


def expanded_mask(attention_mask: torch.Tensor, n: int) -> torch.Tensor:
    """The mask as the model's attention reads it (Spec §2.4): ``[B, 1, n, T +
    n]`` boolean, slot ``s`` visible to input ``j`` when the row attends it and
    ``s <= T + j``. Passed to the model, transformers uses it as it is instead of
    rebuilding it from the ``[B, T + n]`` mask at every call (0.1–0.5 ms a call
    on the development CPU, where a draft call of the default pair costs about
    1 ms). Only for a mask with padding whose ``n`` inputs are all attended:
    an all-ones mask lets transformers drop the mask altogether, and a masked
    input would be a query row that attends nothing (NaN in SDPA), which
    transformers' own construction guards against. Otherwise the mask is
    returned unchanged."""
    full, fed = torch.stack([attention_mask.all(), attention_mask[:, -n:].all()]).tolist()
    if full or not fed:
        return attention_mask
    width = attention_mask.shape[1]
    slots = torch.arange(width, device=attention_mask.device)
    causal = slots[None, :] <= slots[width - n:, None]  # [n, T + n]
    return attention_mask.bool()[:, None, None, :] & causal


@torch.no_grad()
def run_forward(model, cache, input_ids, attention_mask, position_ids, logits_to_keep: int = 0):
    """One forward call that extends ``cache`` by ``input_ids.shape[1]`` slots.

    ``input_ids``/``position_ids``: ``[B, n]``; ``attention_mask``: ``[B, T + n]``
    over cache slots then inputs, given to the model as :func:`expanded_mask`
    over a non-empty cache (a call that feeds the prompt, padding included,
    keeps transformers' own construction). Returns logits ``[B, n or logits_to_keep, V]``.
    """
    if cache_length(cache):
        attention_mask = expanded_mask(attention_mask, input_ids.shape[1])
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=logits_to_keep,
    )
    return out.logits
