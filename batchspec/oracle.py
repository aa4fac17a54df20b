"""A key/value oracle over Hugging Face models for the semantic mode of I3 (Spec §3.3).

Pass it to :func:`batchspec.invariants.check` / ``violations`` (``oracle=``) or to
:func:`batchspec.invariants.watch`; ``batchspec.generate(check_invariants="semantic")``
builds one itself. It runs a fresh single-sequence forward per row, per model, per
step: many times the decode time, which is why the default mode checks cache
contents by provenance fingerprints instead (Spec §3.6).
"""

from __future__ import annotations

import torch

from .reference.model_call import run_forward
from .reference.storage import layer_tensors, new_cache


def hf_oracle(models: dict):
    """``oracle(name, tokens)``: per-layer ``(keys, values)`` ``[1, H, n, D]`` of a
    fresh single-sequence forward of ``tokens`` at positions ``0 .. n-1``."""

    @torch.no_grad()
    def oracle(name: str, tokens: list[int]):
        model = models[name]
        cache = new_cache(model)
        ids = torch.tensor([tokens], dtype=torch.long, device=model.device)
        positions = torch.arange(len(tokens), device=model.device)[None, :]
        run_forward(model, cache, ids, torch.ones_like(ids), positions, logits_to_keep=1)
        return layer_tensors(cache)

    return oracle
