"""EQSPEC: synchronise the batch after every round (Spec §4, Paper §3).

The algorithm is a generator of :class:`Event` s, one after every step. It
does no timing and no printing: the caller (``batchspec.api``) times the
steps from outside and checks the invariants on each event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator

import torch

from . import acceptance, state as layout, transitions
from .draft_policy import DraftPolicy, learn_from_round
from .state import BatchState, RowOutput
from .transitions import Models, Round


@dataclass(frozen=True)
class Steps:
    """The transitions a round is made of: the one hook through which a test
    or a tutorial swaps a step for a deliberately faulty one
    (``dataclasses.replace(STEPS, verify=...)``) without a flag in the loop."""

    prefill: object = transitions.prefill
    draft_one: object = transitions.draft_one
    verify: object = transitions.verify
    accept: object = acceptance.greedy
    accept_sampled: object = acceptance.sampled
    commit_counts: object = acceptance.commit_counts
    catch_up: object = transitions.catch_up
    repad: object = layout.repad
    unpad_append_repad: object = transitions.unpad_append_repad
    sampler: object = None  # sampling.Sampler for speculative sampling; None: greedy (Spec §4.3.2)


STEPS = Steps()


@dataclass
class RoundRecord:
    """What one round did, for statistics and traces (Contributing §4.7)."""

    round: int
    requests: list[int]  # rows at the start of the round
    drafted: int  # k'
    accepted: list[int]  # m_i, drafts accepted
    appended: list[int]  # a_i: how many tokens each row committed (after EOS / budget cuts)
    width: int  # L' after the round
    realigned: bool  # the caches were realigned (some δ_i != 0 or a row left), not only cropped
    wasted: list[int] | None = None  # verified tokens thrown away per row (rollback baseline)
    alpha: list[list[float]] | None = None  # per row, Σ min(p, q) at each drafted slot (sampling)
    probed: list[int] | None = None  # k' = 0: per row, 1 if a one-token draft would have been accepted


@dataclass
class Event:
    """Yielded after every step: the phase for timing, the state for checking."""

    phase: str  # "draft" | "verify" | "realign" | "other"
    step: str  # observation step: "prefill" | "draft" | "verify" | "realign"; "finish" (empty batch)
    state: BatchState
    calls: list
    drafts: torch.Tensor | None = None  # [B, k'] of the current round
    record: RoundRecord | None = None
    committed: list[list[int]] | None = None  # verify step: the a_i tokens each row commits (I5)
    sampled: object | None = None  # verify step under sampling: what I8 re-decides from
    observe: object | None = None  # () -> Observation, for a decoder with its own layout (baselines)


Decoder = Generator[Event, None, dict[int, RowOutput]]


def decode(models: Models, prompts: list[list[int]], requests: list[int], k: DraftPolicy,
           max_new_tokens: int, eos: torch.Tensor | None, steps: Steps = STEPS) -> Decoder:
    """Decode one batch with EQSPEC, ``k`` drafts per round as the draft policy
    says (``Fixed(k)``, ``Auto``, ``Confident``: Spec §4.2) or, with
    ``models.draft is None`` and ``Fixed(0)``, plain autoregressive decoding
    through the same padding machinery. Returns each request's output (Spec §4)."""
    outputs = {r: RowOutput() for r in requests}
    if max_new_tokens == 0:
        return outputs
    calls: list = []
    state = steps.prefill(models, prompts, requests, calls, room=max_new_tokens)  # never grows (Spec §2.3)
    yield Event("other", "prefill", state, calls)
    while state.batch:
        yield from eqspec_round(models, state, k, max_new_tokens, eos, outputs, steps)
    return outputs


@dataclass
class Speculation:
    """What steps 1–3 of a round decided (Spec §4.7.1), shared by EQSPEC and EXSPEC."""

    rnd: Round
    verdict: object  # acceptance.Verdict
    a: torch.Tensor  # [B] a_i, tokens each row commits
    eos_hit: torch.Tensor  # [B] bool
    finished: torch.Tensor  # [B] bool
    committed: list[list[int]]  # the a_i tokens of each row
    probed: list[int] | None = None  # k' = 0: the free acceptance probe, one try per row (Spec §4.2.2)
    lag: int = 0  # 1: the catch-up was deferred; the draft cache is realigned one slot short (Spec §4.2.1)


def speculate(models, state: BatchState, policy: DraftPolicy, max_new_tokens, eos,
              steps: Steps = STEPS, defer: bool = False) -> Generator[Event, None, Speculation]:
    """Steps 1–3 of a round on an aligned batch (Spec §4.7.1): draft ``k``
    tokens, ``policy.choose``'s, fewer if it stops early (Spec §4.2), verify
    and decide, catch the draft cache up, or with ``defer`` (EQSPEC, greedy,
    ``k' >= 1``) leave that to the next round's first draft call and say so
    in ``lag`` (Spec §4.2.1). Returns what was decided."""
    budget = max_new_tokens - state.generated  # [B] remaining per row
    # 1. Draft k' = min(k, smallest remaining budget) tokens per row (Spec §4.2), and with a policy
    # that spares_last below the largest, fewer if the policy stops drafting early (Spec §4.2.3).
    cap = int(budget.min()) if not policy.spares_last else min(int(budget.min()), int(budget.max()) - 1)
    rnd = Round(min(policy.choose(state.batch), cap), state.tokens.new_zeros((state.batch, 0)),
                sampler=steps.sampler, requests=list(state.requests), start=state.length.clone())
    while rnd.drafts.shape[1] < rnd.k:
        calls: list = []
        steps.draft_one(models, state, rnd, calls)
        j = rnd.drafts.shape[1]
        if j < rnd.k and policy.stops_early and not policy.keep_drafting(rnd.newest_probability()):
            rnd.stop_at(j)
        yield Event("draft", "draft", state, calls, rnd.drafts)
    if rnd.sampler is not None and models.draft is not None:  # q at the bonus slot: the catch-up, run first (Spec §4.3.2)
        calls = []
        rnd.draft_logits.append(steps.catch_up(models, state, rnd, calls)[:, -1])
        yield Event("draft", "draft", state, calls, rnd.drafts)
    # 2. Verify [newest] + drafts in one target pass; decide acceptance (Spec §4.3).
    calls = []
    logits = steps.verify(models, state, rnd, calls)  # [B, k'+1, V]
    verdict = steps.accept(rnd.drafts, logits) if rnd.sampler is None else steps.accept_sampled(rnd, logits)
    a, eos_hit, finished = steps.commit_counts(verdict, budget, eos)  # [B] each
    committed = [row[:n] for row, n in zip(verdict.proposal.tolist(), a.tolist())]  # two host syncs, not 2·B
    yield Event("verify", "verify", state, calls, rnd.drafts, committed=committed, sampled=rnd.record())
    # 3. Greedy: a staying row that accepted all k' drafts (every row when k' = 0) needs the last fed
    # token's KV (Spec §4.2.1): fed now, or (defer, k' >= 1) by the next round's first draft call;
    # a sampled round ran its catch-up before verifying.
    probed = None if verdict.probed is None else verdict.probed.tolist()  # sampled k' = 0 (Spec §4.2.2)
    needed = (models.draft is not None and rnd.sampler is None
              and bool(((verdict.accepted_drafts == rnd.k) & ~finished).any()))
    lag = int(needed and defer and rnd.k >= 1)
    if needed and not lag:
        calls = []
        after = steps.catch_up(models, state, rnd, calls)  # [B, 1, V]
        if rnd.k == 0 and after is not None:  # the draft's choice after the newest token, against the target's
            probed = (after[:, -1].argmax(-1) == verdict.proposal[:, 0]).long().tolist()
        yield Event("draft", "draft", state, calls, rnd.drafts)
    return Speculation(rnd, verdict, a, eos_hit, finished, committed, probed, lag)


def alphas(verdict) -> list[list[float]] | None:
    """Per row, ``α = Σ min(p, q)`` at each drafted slot (sampling), for statistics."""
    return None if getattr(verdict, "alpha", None) is None else verdict.alpha.tolist()


def eqspec_round(models, state: BatchState, k: DraftPolicy, max_new_tokens, eos, outputs,
                 steps: Steps = STEPS) -> Generator[Event, None, None]:
    """One round of EQSPEC (Spec §4.7), step numbers as in the spec."""
    state.round += 1
    # 1.-3. Draft as many as the policy says, verify and decide; the catch-up deferred (Spec §4.7.1, §4.2.1).
    spec = yield from speculate(models, state, k, max_new_tokens, eos, steps, defer=True)
    # 4. Commit a_i tokens per row; finished rows leave at once (Spec §4.6).
    for request, tokens, finished, eos_hit in zip(state.requests, spec.committed, spec.finished.tolist(),
                                                  spec.eos_hit.tolist()):
        outputs[request].tokens.extend(tokens)
        if finished:
            outputs[request].stop = "eos" if eos_hit else "length"
    # 5. Unpad - append - repad; shift both caches by δ_i (Spec §4.4, §4.5).
    plan = steps.repad(state.pad, state.length, spec.a, ~spec.finished)
    record = RoundRecord(state.round, list(state.requests), spec.rnd.k, spec.verdict.accepted_drafts.tolist(),
                         spec.a.tolist(), plan.width, plan.realigns and plan.rows.numel() > 0,
                         alpha=alphas(spec.verdict), probed=spec.probed)
    learn_from_round(k, record)
    if plan.rows.numel() == 0:  # every row finished: nothing left to realign
        state.tokens = state.tokens[:0]
        yield Event("realign", "finish", state, [], None, record)
        return
    steps.unpad_append_repad(state, spec.verdict, plan, lag=spec.lag)
    yield Event("realign", "realign", state, [], None, record)
