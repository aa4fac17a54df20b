"""EXSPEC under random interleavings: a Hypothesis state machine (Spec §8).

Rules submit requests, run rounds and drain the scheduler, in any order. The
draft is the project's scripted draft (``batchspec.models.scripted``): a real
model whose cache is really filled, whose proposals follow the target's
greedy continuation except at drawn generated indices, so every round's
acceptance ``m_i`` is forced and random (a row accepts the drafts before its
first deviation). Since EXSPEC picks its rows inside the round, the
transition hook tells the script which request each row serves before every
call that reaches the draft.

After every rule: no invariant was violated at any step (``"record"`` mode
collects them; ``@invariant`` ignores return values, so it asserts), every
request is in exactly one place (queued, in the window, completed), every
output so far is a prefix of its batch-1 reference and every completed one
equals it, and each round accepted exactly what the script forced.
"""

from __future__ import annotations

import pytest
import dataclasses

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, \
    run_state_machine_as_test

from _spec_helpers import one_thread
from batchspec.models import tiny
from batchspec.models.scripted import Script, ScriptedDraft
from batchspec.reference.exspec import EXSPEC_STEPS
from batchspec.reference.exspec_policy import POLICIES
from batchspec.scheduler import Scheduler
from batchspec.testing import cut_at_eos, reference_greedy

BUDGET = 8  # largest max_new_tokens drawn
TARGET, DRAFT = tiny.pair("llama", "perturbed")
CONTINUATIONS: dict[tuple, list[int]] = {}  # prompt -> target.generate's first BUDGET tokens


def continuation(prompt: list[int]) -> list[int]:
    if tuple(prompt) not in CONTINUATIONS:
        CONTINUATIONS[tuple(prompt)] = reference_greedy(TARGET, prompt, BUDGET)
    return CONTINUATIONS[tuple(prompt)]


def following(steps):
    """``steps`` that name each row's request to the scripted draft before every call to it."""

    def prefill(models, prompts, requests, calls, **options):  # EXSPEC's fill=True (Spec §8.4)
        models.draft.follow(requests)
        return steps.prefill(models, prompts, requests, calls, **options)

    def draft_one(models, state, rnd, calls):
        models.draft.follow(state.requests)
        steps.draft_one(models, state, rnd, calls)

    def catch_up(models, state, rnd, calls):
        models.draft.follow(state.requests)
        steps.catch_up(models, state, rnd, calls)

    return dataclasses.replace(steps, prefill=prefill, draft_one=draft_one, catch_up=catch_up)


class ExspecMachine(RuleBasedStateMachine):
    @initialize(batch=st.integers(1, 4), extra=st.integers(0, 3), k=st.integers(1, 3),
                budget=st.integers(1, BUDGET), eos=st.sampled_from([None, 63, 82, [2, 9]]),
                policy=st.sampled_from(sorted(POLICIES)))
    def start(self, batch, extra, k, budget, eos, policy):
        self.draft = ScriptedDraft(DRAFT, {})
        self.scheduler = Scheduler(TARGET, self.draft, num_draft_tokens=k, max_new_tokens=budget,
                                   batch_size=batch, window_size=batch + extra, eos_token_id=eos,
                                   check_invariants="record", policy=POLICIES[policy],
                                   steps=following(EXSPEC_STEPS))
        self.budget, self.eos = budget, eos
        self.expected: dict[int, list[int]] = {}
        self.prompts: dict[int, list[int]] = {}
        self.generated: dict[int, int] = {}  # tokens committed so far, from the round records
        self.seen_rounds = 0

    @rule(prompt=st.lists(st.integers(2, 95), min_size=1, max_size=6),
          deviations=st.sets(st.integers(0, BUDGET - 1), max_size=4))
    def submit(self, prompt, deviations):
        request = self.scheduler.submit(prompt)
        assert request == len(self.prompts)  # ids are handed out in order
        self.draft.scripts[request] = Script(len(prompt), continuation(prompt)[: self.budget], set(deviations))
        self.prompts[request] = prompt
        self.expected[request] = cut_at_eos(continuation(prompt)[: self.budget], self.eos)
        self.generated[request] = 0

    @rule()
    def step(self):
        done = self.scheduler.step()
        assert all(r in self.prompts for r in done)
        self._check_forced_acceptance()

    @precondition(lambda self: self.scheduler.pending > 0)
    @rule()
    def drain(self):
        self.scheduler.run()
        self._check_forced_acceptance()
        assert self.scheduler.pending == 0 and set(self.scheduler.completed) == set(self.prompts)

    def _check_forced_acceptance(self):
        for record in self.scheduler.stats.per_round[self.seen_rounds:]:
            for request, m, a in zip(record.requests, record.accepted, record.appended):
                g = self.generated[request]
                first = min((d for d in self.draft.scripts[request].deviations if d >= g), default=g + record.drafted)
                assert m == min(first - g, record.drafted), (request, g, record)
                self.generated[request] += a
        self.seen_rounds = len(self.scheduler.stats.per_round)

    @invariant()
    def no_invariant_violated(self):
        assert self.scheduler.violations == []

    @invariant()
    def every_request_in_exactly_one_place(self):
        pool = self.scheduler.pool
        places = [r for r, _ in pool.queue] + [m.request for m in pool.window] + list(self.scheduler.completed)
        assert sorted(places) == sorted(self.prompts)

    @invariant()
    def outputs_follow_the_reference(self):
        for member in self.scheduler.pool.window:
            request, tokens = member.request, member.output.tokens
            assert member.output.stop is None
            assert tokens == self.expected[request][: len(tokens)] and len(tokens) < len(self.expected[request])
            assert member.tokens.tolist() == self.prompts[request] + tokens
        for request, out in self.scheduler.completed.items():
            assert out.tokens == self.expected[request]
            stop = "eos" if len(out.tokens) < self.budget or (self.eos and out.tokens[-1] in (
                self.eos if isinstance(self.eos, list) else [self.eos])) else "length"
            assert out.stop == stop

    def teardown(self):
        if hasattr(self, "scheduler"):
            self.scheduler.run()  # nothing submitted is ever lost
            assert self.scheduler.violations == []
            assert {r: o.tokens for r, o in self.scheduler.completed.items()} == self.expected


@pytest.mark.slow
def test_exspec_state_machine():
    with one_thread():
        run_state_machine_as_test(ExspecMachine, settings=settings(
            max_examples=30, stateful_step_count=20, deadline=None))
