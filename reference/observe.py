"""Fill the invariants' observation record from an event (Spec §3)."""

from __future__ import annotations

from ..invariants.observation import BOUNDARY_STEPS, CacheView, Observation
from . import cache as kv
from .eqspec import Event
from .state import attention_mask


def observation(event: Event) -> Observation:
    """The observation the invariants read after ``event``'s step."""
    if event.observe is not None:  # a decoder with its own layout records what it really holds
        return event.observe()
    state = event.state
    pad = state.pad.tolist()
    whole = event.step in BOUNDARY_STEPS  # where I3 reads every slot
    caches = {"target": view(state.target_cache, whole)}
    if state.draft_cache is not None:
        caches["draft"] = view(state.draft_cache, whole)
    return Observation(
        round=state.round,
        step=event.step,
        tokens=state.tokens,
        mask=attention_mask(state.pad, state.width),
        pad=pad,
        length=state.length.tolist(),
        caches=caches,
        calls=list(event.calls),
        requests=list(state.requests),
        draft_tokens=event.drafts,
        committed=event.committed,
        sampled=event.sampled,
    )


def view(cache, whole: bool) -> CacheView:
    """The invariants' view of one of our caches: its layers, and (``whole``) the
    stacked tensor they are slices of."""
    return CacheView(kv.layer_tensors(cache), kv.stacked_tensor(cache) if whole else None)
