"""The known-bug catalogue: real bugs of this field, injected into EQSPEC on purpose.

Each :class:`Fault` swaps one or more transitions of the correct algorithm
through the one documented hook, ``dataclasses.replace(STEPS, ...)`` (see
:class:`batchspec.reference.eqspec.Steps`); no flag enters the loop. Run one
with :func:`run`, which drives it through the same driver and the same
invariant checks as :func:`batchspec.generate`::

    result = faults.run("bonus_from_draft", target, draft, prompts, check_invariants="record")
    result.violations[0]   # I5 greedy_verification, at the first round with a rejection

What catches each fault, and at which round, is asserted in
``tests/invariants/test_faults.py``; the faults that only the semantic mode of I3 sees
are the reason that mode exists (Spec §3.3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from . import api, methods
from .reference import acceptance
from .reference.acceptance import Verdict
from .reference.eqspec import STEPS, Steps, decode
from .reference.moves import crop_to, take_slots
from .reference.state import FILLER
from .reference.storage import cache_length
from .reference.transitions import unpad_append_repad


@dataclass(frozen=True)
class Fault:
    """One deliberate bug: its name, the real bug it has the shape of, the
    faulty transitions, and what is expected to catch it."""

    name: str
    shape: str
    steps: Steps
    caught_by: str


# --- position counter advanced by one (transformers #30042) --------------------------------

def _drift(state) -> torch.Tensor:
    """``[B, 1]``: how far a per-row counter that started right after the prompt
    and was advanced by one per round, not by ``a_i``, is off the committed
    stream's positions; 0 in round 1, so the prompt's slots stay right."""
    return ((state.round - 1) - (state.length - state.prompt_length))[:, None]


def _counted(step):
    """``step`` (a draft, verify or catch-up call) fed the counter's positions."""
    def faulty(models, state, rnd, calls):
        positions = rnd.frame(state)[1]  # [B, L + k']
        rnd.positions = positions + _drift(state)
        try:
            return step(models, state, rnd, calls)
        finally:
            rnd.positions = positions
    return faulty


# --- realignment faults (Spec §4.5) ---------------------------------------------------------

def _caches(state):
    return [c for c in (state.target_cache, state.draft_cache) if c is not None]


def _identity(rows: torch.Tensor, length: int) -> torch.Tensor:
    """Slots ``[B', length]`` that keep every row's slots where they are."""
    return torch.arange(length, device=rows.device).expand(rows.numel(), length)


def _finish(state, tokens, plan):
    """The grid half of Spec §4.4, as the correct step does it."""
    state.tokens = tokens  # [B', L']
    state.requests = [state.requests[i] for i in plan.rows.tolist()]
    state.prompt_length = state.prompt_length[plan.rows]
    state.pad, state.length = plan.pad, plan.length


def _append_shared_offset(state, verdict, plan):
    """The grid is realigned per row, but both caches keep every slot the round
    wrote, as if every row had accepted the whole draft block."""
    extended = torch.cat([state.tokens, verdict.proposal], dim=1)
    for cache in _caches(state):
        take_slots(cache, plan.rows, _identity(plan.rows, cache_length(cache)))
    _finish(state, extended[plan.rows[:, None], plan.slots], plan)


def _append_draft_unaligned(state, verdict, plan):
    """The target's cache is realigned; the draft's only loses finished rows and
    its tail, its rows are not shifted by ``δ_i``."""
    extended = torch.cat([state.tokens, verdict.proposal], dim=1)
    take_slots(state.target_cache, plan.rows, plan.slots[:, : plan.width - 1])
    take_slots(state.draft_cache, plan.rows, _identity(plan.rows, plan.width - 1))
    _finish(state, extended[plan.rows[:, None], plan.slots], plan)


def _append_keep_rejected(state, verdict, plan):
    """A row that rejected a draft keeps its first rejected slot: its cache is
    gathered one slot to the right, so it ends with the rejected draft's
    key/value and its first content slot slides into the padding."""
    extended = torch.cat([state.tokens, verdict.proposal], dim=1)
    rejected = (verdict.accepted_drafts < verdict.proposal.shape[1] - 1)[plan.rows].long()  # [B']
    for cache in _caches(state):
        slots = plan.slots[:, : plan.width - 1] + rejected[:, None]
        take_slots(cache, plan.rows, slots.clamp(max=cache_length(cache) - 1))
    _finish(state, extended[plan.rows[:, None], plan.slots], plan)


def _append_permuted(state, verdict, plan, lag: int = 0):
    """The realignment takes each cache row from the wrong batch row
    (rolled by one) while the grid keeps the right order."""
    if not plan.realigns:
        unpad_append_repad(state, verdict, plan, lag)
        return
    extended = torch.cat([state.tokens, verdict.proposal], dim=1)
    for cache in _caches(state):
        take_slots(cache, plan.rows.roll(1), plan.slots[:, : plan.width - 1])
    _finish(state, extended[plan.rows[:, None], plan.slots], plan)
    _lag_draft(state, lag)


def _append_pad_from_id(state, verdict, plan, lag: int = 0):
    """Correct realignment, then ``p_i`` re-inferred by counting pad-id tokens
    in the row (``c_i = L - p_i``), the ``mask = input_ids != pad_id`` habit:
    an emitted pad id (here :data:`FILLER`, the tiny models' ``pad_token_id``)
    counts as padding, and the row's first content token is dropped."""
    unpad_append_repad(state, verdict, plan, lag)
    state.pad = (state.tokens == FILLER).sum(1)
    state.length = state.width - state.pad


def _lag_draft(state, lag: int) -> None:
    """Leave the draft cache ``lag`` slots shorter than the target's, at most, as
    the correct realignment does when the catch-up is deferred (Spec §4.2.1),
    so that the fault stays the only difference from the correct round."""
    if lag and state.draft_cache is not None:
        crop_to(state.draft_cache, min(cache_length(state.draft_cache), cache_length(state.target_cache) - lag))


def _lagging(append):
    """``append`` (a faulty realignment of both caches) followed by :func:`_lag_draft`."""
    def faulty(state, verdict, plan, lag: int = 0):
        append(state, verdict, plan)
        _lag_draft(state, lag)
    faulty.__doc__ = append.__doc__
    return faulty


# --- acceptance fault (Spec §4.3.1) ---------------------------------------------------------

def _accept_draft_bonus(drafts, target_logits) -> Verdict:
    """Greedy acceptance, but the token after the accepted drafts is the draft's
    own (the rejected one); only after all ``k'`` is it the target's, as the
    draft proposed nothing there."""
    verdict = acceptance.greedy(drafts, target_logits)
    k = drafts.shape[1]
    return Verdict(verdict.accepted_drafts, torch.cat([drafts, verdict.proposal[:, k:]], dim=1))


CATALOGUE: dict[str, Fault] = {f.name: f for f in (
    Fault("position_counter", "transformers #30042: cache position advanced by one, not by the accepted count",
          replace(STEPS, draft_one=_counted(STEPS.draft_one), verify=_counted(STEPS.verify),
                  catch_up=_counted(STEPS.catch_up)),
          "I2 at the first call after a round that committed more than one token"),
    Fault("shared_offset", "mlx-vlm #1155: one cache offset advanced by the whole draft block for every row",
          replace(STEPS, unpad_append_repad=_lagging(_append_shared_offset)),
          "semantic I3 at the first round with some δ_i != 0; I3 (cache length) at the first "
          "round whose L' - 1 is not L + k'"),
    Fault("draft_unaligned", "the draft cache left unaligned while the target's is realigned",
          replace(STEPS, unpad_append_repad=_lagging(_append_draft_unaligned)),
          "semantic I3 (draft) at the first round with some δ_i != 0; output stays exact"),
    Fault("bonus_from_draft", "DSD: the bonus token taken from the draft instead of the target",
          replace(STEPS, accept=_accept_draft_bonus),
          "I5 at the verify step of the first round with a rejected draft"),
    Fault("keep_rejected_slot", "realignment off by one: keeps the first rejected slot",
          replace(STEPS, unpad_append_repad=_lagging(_append_keep_rejected)),
          "semantic I3 at the first round where a staying row rejected a draft"),
    Fault("permuted_rows", "rows of the batch permuted by the realignment",
          replace(STEPS, unpad_append_repad=_append_permuted),
          "semantic I3 at the first round whose realignment runs with B' >= 2"),
    Fault("pad_from_token_id", "padding inferred from the pad token id when the model emits it",
          replace(STEPS, unpad_append_repad=_append_pad_from_id),
          "semantic I3 at the round that commits the pad id"),
)}


def method(fault: str) -> api.Method:
    """A :class:`batchspec.api.Method` that runs EQSPEC with ``fault`` injected."""
    steps = CATALOGUE[fault].steps

    def run(models, prompts, requests, config):
        return decode(models, prompts, requests, config.k, config.max_new_tokens, config.eos, steps)

    return methods.Method(methods.static_batches(run), True, name=f"fault:{fault}")


def run(fault: str, target, draft, prompts, **options) -> api.GenerationResult:
    """``batchspec.generate`` with ``fault`` injected (same options, same driver,
    same checks); ``check_invariants`` defaults to ``"record"``."""
    if fault not in CATALOGUE:
        raise ValueError(f"fault must be one of {sorted(CATALOGUE)}, got {fault!r}")
    options.setdefault("check_invariants", "record")
    return api.generate(target, draft, prompts, method=method(fault), **options)
