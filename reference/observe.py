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
    mask, pad, length = grid(state)
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


_GRID: list = [None]  # the last grid built: ((pad, length, (their versions, L)), grid)


def grid(state) -> tuple:
    """``(mask [B, L], p_i list, c_i list)`` of ``state`` (Spec §2.2). Between two
    boundaries a state keeps the same ``pad`` and ``length`` tensors and the same
    ``L``, so the grid is rebuilt only when one of them is replaced, changed in
    place (its version counter moves) or ``L`` changes: once per round. Tensors
    made under ``torch.inference_mode`` keep no version counter: their grid is
    rebuilt at every step. The observations of one round share the mask: read
    it, never write into it."""
    pad, length = state.pad, state.length
    if pad.is_inference() or length.is_inference():
        return attention_mask(pad, state.width), pad.tolist(), length.tolist()
    key = (pad, length, (pad._version, length._version, state.width))
    last = _GRID[0]
    if last is None or last[0][0] is not pad or last[0][1] is not length or last[0][2] != key[2]:
        last = _GRID[0] = (key, (attention_mask(pad, state.width), pad.tolist(), length.tolist()))
    mask, pads, lengths = last[1]
    return mask, list(pads), list(lengths)  # the lists are the observation's own


def view(cache, whole: bool) -> CacheView:
    """The invariants' view of one of our caches: its layers, and (``whole``) the
    stacked tensor they are slices of."""
    return CacheView(kv.layer_tensors(cache), kv.stacked_tensor(cache) if whole else None)
