"""Fill the invariants' observation record from an event (Spec §3)."""

from __future__ import annotations

from ..invariants.observation import CacheView, Observation
from . import cache as kv
from .eqspec import Event
from .state import attention_mask


def observation(event: Event) -> Observation:
    """The observation the invariants read after ``event``'s step."""
    if event.observe is not None:  # a decoder with its own layout records what it really holds
        return event.observe()
    state = event.state
    caches = {"target": CacheView(kv.layer_tensors(state.target_cache))}
    if state.draft_cache is not None:
        caches["draft"] = CacheView(kv.layer_tensors(state.draft_cache))
    return Observation(
        round=state.round,
        step=event.step,
        tokens=state.tokens,
        mask=attention_mask(state.pad, state.width),
        pad=state.pad.tolist(),
        length=state.length.tolist(),
        caches=caches,
        calls=list(event.calls),
        requests=list(state.requests),
        draft_tokens=event.drafts,
        committed=event.committed,
        sampled=event.sampled,
    )
