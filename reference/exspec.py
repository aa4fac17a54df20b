"""EXSPEC: avoid the synchronisation by scheduling (Spec §8, Paper §4).

A pool of active sequences, each with its own batch-1 caches, ragged between
rounds. Each round a policy picks up to ``B`` members of a sliding window of
``W`` (Spec §8.2); members of one length stack with no padding change, no
position recompute and no cache shift, anything else falls back to EQSPEC's
realignment (Spec §8.3). Drafting, verification, acceptance and commit are
EQSPEC's own transitions (Spec §4.7.1), reached through the same
:class:`Steps` hook. After verification the rows go back to the pool
unaligned; finished rows leave at once and queued prompts take their place.

Like :mod:`.eqspec`, the algorithm is a generator of :class:`Event` s and
does no timing and no printing. The observation after forming a batch
describes the formed (padded) batch; each row released to the pool is
observed on its own, as the one-row batch it now is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator

import torch

from . import exspec_pool
from .eqspec import Event, RoundRecord, Steps, alphas, speculate
from .draft_policy import DraftPolicy, learn_from_round
from .exspec_policy import Policy
from .exspec_pool import Pool
from .state import BatchState, RowOutput
from .transitions import Models


@dataclass(frozen=True)
class ExspecSteps(Steps):
    """EQSPEC's transitions plus EXSPEC's two moves (Spec §8.3), swappable
    the same way: ``dataclasses.replace(EXSPEC_STEPS, form=...)``."""

    form: Callable[..., tuple[BatchState, bool]] = exspec_pool.form  # (models, members, round, reuse)
    release: Callable[..., list[exspec_pool.Member]] = exspec_pool.release  # (state, grid, length, rows)


EXSPEC_STEPS = ExspecSteps()


@dataclass
class ExspecRecord(RoundRecord):
    """A round of EXSPEC. ``width`` is the formed batch's ``L``; ``moved`` is
    True when the batch fell back to realignment."""

    grouped: bool = True  # formed from one same-length group (no realignment)
    padding: int = 0  # Σ p_i of the formed batch: the fallback's total |δ_i|
    waiting: list[int] = field(default_factory=list)  # queued or window requests not in the batch
    seconds: float | None = None  # the round's duration, stamped by the driver (never here)


Decoder = Generator[Event, None, dict[int, RowOutput]]


def decode(models: Models, pool: Pool, policy: Policy, k: DraftPolicy, max_new_tokens: int,
           eos: torch.Tensor | None, steps: ExspecSteps = EXSPEC_STEPS) -> Decoder:
    """Run rounds until every submitted request has finished; return each
    request's output (Spec §8.4)."""
    outputs: dict[int, RowOutput] = {}
    while pool.active:
        outputs.update((yield from exspec_round(models, pool, policy, k, max_new_tokens, eos, steps)))
    return outputs


def exspec_round(models: Models, pool: Pool, policy: Policy, k: DraftPolicy, max_new_tokens: int,
                 eos: torch.Tensor | None, steps: ExspecSteps = EXSPEC_STEPS) -> Decoder:
    """One round of EXSPEC (Spec §8.4), step numbers as in the spec. Returns
    the outputs of the requests that finished in it."""
    entering = pool.admit()
    if max_new_tokens == 0:  # nothing to generate: requests finish as they enter (as in EQSPEC)
        return {request: RowOutput() for request, _ in entering}
    pool.round += 1
    # 1. Queued prompts enter the window: one left-padded prefill, then one member per row (Spec §4.1, §8.1).
    if entering:
        calls: list = []
        state = steps.prefill(models, [p for _, p in entering], [r for r, _ in entering], calls, fill=True)
        state.round = pool.round
        yield Event("other", "prefill", state, calls)
        pool.window += steps.release(state, state.tokens, state.length.tolist(), list(range(state.batch)))
    # 2. The policy picks up to B members; stack them, realigning only if their lengths differ (Spec §8.2, §8.3).
    chosen = [pool.window[i] for i in policy([m.candidate for m in pool.window], pool.batch_size)]
    waiting = pool.waiting(chosen)
    state, realigned = steps.form(models, chosen, pool.round, reuse=pool.storage)
    pool.storage = (state.target_cache, state.draft_cache)
    yield Event("realign" if realigned else "other", "realign", state, [])
    # 3.-5. Draft, verify and decide, catch up: EQSPEC's own steps (Spec §4.7.1).
    spec = yield from speculate(models, state, k, max_new_tokens, eos, steps)
    a, finished, verdict = spec.a, spec.finished, spec.verdict
    # 6. Commit a_i tokens per row; finished rows leave at once (Spec §4.6).
    done: dict[int, RowOutput] = {}
    for i, member in enumerate(chosen):
        member.output.tokens.extend(spec.committed[i])
        if finished[i]:
            member.output.stop = "eos" if spec.eos_hit[i] else "length"
            done[member.request] = member.output
    # 7. The other rows go back to the pool unaligned, each with its c_i + a_i tokens (Spec §8.3).
    grid = torch.cat([state.tokens, verdict.proposal], dim=1)  # [B, L + k' + 1]
    stay = (~finished).nonzero().flatten().tolist()
    released = steps.release(state, grid, (state.length + a).tolist(), stay)
    for member in released:
        yield Event("other", "realign", member, [], observe=lambda m=member, r=pool.round: m.observation(r))
    pool.settle(chosen, released)
    record = ExspecRecord(round=pool.round, requests=list(state.requests), drafted=spec.rnd.k,
                          accepted=verdict.accepted_drafts.tolist(), appended=a.tolist(),
                          width=state.width, realigned=realigned, grouped=not realigned,
                          padding=int(state.pad.sum()), waiting=waiting, alpha=alphas(verdict),
                          probed=spec.probed)
    learn_from_round(k, record)  # the draft policy learns from the round (Spec §4.2.2)
    state.tokens = state.tokens[:0]  # the formed batch dissolves
    if not pool.active:  # nothing left to form a batch from: let its storage go
        pool.storage = (None, None)
    yield Event("other", "finish", state, [], None, record)
    return done
