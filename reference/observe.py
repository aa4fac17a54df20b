"""Fill the invariants' observation record from an event (Spec §3)."""

from __future__ import annotations

import torch

from ..invariants.memo import Memo
from ..invariants.observation import BOUNDARY_STEPS, CacheView, Observation
from .eqspec import Event
from .state import BatchState, attention_mask
from .storage import layer_tensors, stacked_tensor


def observation(event: Event, memo: Memo | None = None) -> Observation:
    """The observation the invariants read after ``event``'s step; ``memo``, the
    checker's, keeps the grid mask of a round (see :func:`grid`)."""
    if event.observe is not None:  # a decoder with its own layout records what it really holds
        return event.observe()
    state = event.state
    mask, pad, length = grid(state, memo)
    whole = event.step in BOUNDARY_STEPS  # where I3 reads every slot
    caches = {"target": view(state.target_cache, whole)}
    if state.draft_cache is not None:
        caches["draft"] = view(state.draft_cache, whole)
    return Observation(
        round=state.round,
        step=event.step,
        tokens=state.tokens,
        mask=mask,
        pad=pad,
        length=length,
        caches=caches,
        calls=list(event.calls),
        requests=list(state.requests),
        draft_tokens=event.drafts,
        committed=event.committed,
        sampled=event.sampled,
    )


def grid(state: BatchState, memo: Memo | None = None) -> tuple[torch.Tensor, list[int], list[int]]:
    """``(mask [B, L], p_i list, c_i list)`` of ``state`` (Spec §2.2). With ``memo``
    the mask is the one it built for the same ``p_i`` and ``L`` (found by those
    values): between two boundaries every step has them, so the mask is built
    once per round and the round's observations share it: read it, never
    write into it."""
    pads, lengths = state.pad.tolist(), state.length.tolist()
    if memo is None:
        return attention_mask(state.pad, state.width), pads, lengths
    return memo.compact_mask(pads, state.width, state.pad.device, torch.long), pads, lengths


def view(cache, whole: bool) -> CacheView:
    """The invariants' view of one of our caches: its layers, and (``whole``) the
    stacked tensor they are slices of."""
    return CacheView(layer_tensors(cache), stacked_tensor(cache) if whole else None)
