"""Reject an observation that cannot be checked, naming the field (Spec §3).

A missing or misnamed field must not switch a check off, nor surface as an
unrelated invariant's message: it is a mistake in the glue, reported as a
``ValueError`` before any predicate runs.
"""

from __future__ import annotations

from .observation import MODELS, STEP_NAMES, Observation


def require_fields(obs: Observation) -> None:
    """Raise ``ValueError`` naming the first field ``obs`` lacks or misstates."""
    if obs.step not in STEP_NAMES:
        raise ValueError(f"Observation.step must be one of {STEP_NAMES}, got {obs.step!r}")
    for name in obs.caches:
        if name not in MODELS:
            raise ValueError(f"Observation.caches: unknown model name {name!r}; use {MODELS}")
    last = {}
    for n, call in enumerate(obs.calls):
        if call.model not in MODELS:
            raise ValueError(f"ForwardCall.model of call {n}: unknown model name {call.model!r}; use {MODELS}")
        last[call.model] = (n, call)
    for model, (n, call) in last.items():
        # a cache does not lose the slots a call just wrote within the call's own step, so a
        # "before" length equal to the step's end length means it was read after the call
        view = obs.caches.get(model)
        if view is not None and call.input_ids.shape[1] and call.cache_length == view.length:
            raise ValueError(f"ForwardCall.cache_length of call {n} ({model}) is {call.cache_length}, the "
                             "cache's length after the step: it was read after the call; it must be the "
                             "slots cached before it")
    if obs.step in ("draft", "verify") and obs.draft_tokens is None:
        raise ValueError(f"Observation.draft_tokens is required at a {obs.step!r} step "
                         "(the round's drafts so far, [B, 0] when none)")
    if obs.step == "verify" and obs.committed is None:
        raise ValueError("Observation.committed is required at the 'verify' step "
                         "(the a_i tokens each row commits; I5 and I7 check them)")
    if obs.committed is not None and len(obs.committed) != obs.tokens.shape[0]:
        raise ValueError(f"Observation.committed has {len(obs.committed)} rows, the grid {obs.tokens.shape[0]}")
