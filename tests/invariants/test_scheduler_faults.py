"""The online Scheduler under injected faults: a Hypothesis state machine (Spec §8.6).

Two schedulers receive the same submissions, cancellations and steps: a
*faulty* one, through which an exception (``RuntimeError`` or
``KeyboardInterrupt``) is injected at a drawn point of a step, and a
*shadow* that never fails. Injection points: before and after every
transition of the ``Steps`` hook (prefill, draft, verify, acceptance, commit
counts, catch-up, form, release), before and after every forward call
(``cache.run_forward``), before and after the policy, and at every event
boundary the driver sees (where the invariants are checked).

After a step that raised, the faulty scheduler must be exactly as before it
(queue, window with tokens, caches and outputs, round, completed, counters,
violations); after a step that did not, it must equal the shadow that took
the same step. After every rule: no invariant violated, every request in
exactly one place (zero lost, zero duplicated), outputs prefixes of the
batch-1 reference, completed outputs equal to it (cut at the request's own
budget and EOS). ``test_fault_machine_many_interleavings`` (``-m exhaustive``) runs
the same machine with thousands of interleavings and prints its counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule, \
    run_state_machine_as_test

from _spec_helpers import one_thread
from batchspec import scheduler as scheduler_module
from batchspec.models import tiny
from batchspec.reference import model_call
from batchspec.reference.exspec import EXSPEC_STEPS
from batchspec.reference.exspec_policy import POLICIES
from batchspec.scheduler import Scheduler
from batchspec.testing import cut_at_eos, reference_greedy

BUDGET = 6  # largest max_new_tokens drawn
TARGET, DRAFT = tiny.pair("llama", "perturbed")
CONTINUATIONS: dict[tuple, list[int]] = {}
FAULTS = (RuntimeError, KeyboardInterrupt)
COUNTS = Counter()  # injected faults per site and kind, steps, examples: for the report


def continuation(prompt) -> list[int]:
    if tuple(prompt) not in CONTINUATIONS:
        CONTINUATIONS[tuple(prompt)] = reference_greedy(TARGET, list(prompt), BUDGET)
    return CONTINUATIONS[tuple(prompt)]


class Injector:
    """Raises ``fault`` at the ``at``-th injection point it passes while armed."""

    def __init__(self):
        self.armed, self.at, self.seen, self.fault = False, 0, 0, RuntimeError

    def arm(self, at: int, fault) -> None:
        self.armed, self.at, self.seen, self.fault = True, at, 0, fault

    def point(self, site: str) -> None:
        if not self.armed:
            return
        if self.seen == self.at:
            self.armed = False
            COUNTS[f"fault {site} {self.fault.__name__}"] += 1
            COUNTS["faults injected"] += 1
            raise self.fault(f"injected at {site}")
        self.seen += 1


INJECTOR = Injector()


def around(site: str, fn):
    """``fn`` with an injection point before and after it."""

    def wrapped(*args, **kwargs):
        INJECTOR.point(f"before {site}")
        out = fn(*args, **kwargs)
        INJECTOR.point(f"after {site}")
        return out

    return wrapped


def faulty_steps():
    """Every transition of the Steps hook wrapped with injection points (its data, the
    sampler, stays as it is)."""
    return dataclasses.replace(EXSPEC_STEPS, **{f.name: around(f.name, getattr(EXSPEC_STEPS, f.name))
                                                for f in dataclasses.fields(EXSPEC_STEPS)
                                                if callable(getattr(EXSPEC_STEPS, f.name))})


@contextmanager
def injection_everywhere():
    """Injection points in every forward call and at every event boundary the driver sees."""
    forward, clocked = model_call.run_forward, scheduler_module.clocked

    def boundaries(decoder, device):
        events = clocked(decoder, device)
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                return stop.value
            INJECTOR.point(f"event {event.step}")
            yield event
            INJECTOR.point(f"after event {event.step}")

    model_call.run_forward, scheduler_module.clocked = around("forward", forward), boundaries
    try:
        yield
    finally:
        model_call.run_forward, scheduler_module.clocked = forward, clocked


def digest(row) -> str | None:
    """Bytes of a member's per-layer (keys, values), exactly."""
    if row is None:
        return None
    h = hashlib.sha1()
    for pair in row.layers():
        for t in pair:
            h.update(str(tuple(t.shape)).encode())
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def fingerprint(s: Scheduler) -> tuple:
    """Everything a step may change, compared exactly (timings excepted)."""
    pool = s.pool
    window = [(m.request, m.tokens.tolist(), m.prompt_length, m.idle, list(m.output.tokens), m.output.stop,
               digest(m.target_kv), digest(m.draft_kv)) for m in pool.window]
    stats = s.stats
    counters = (stats.rounds, stats.target_calls, stats.draft_calls, stats.realignments, len(stats.per_round),
                stats.generated_tokens, [(r.requests, r.accepted, r.appended) for r in stats.per_round])
    completed = {r: (list(o.tokens), o.stop) for r, o in s.completed.items()}
    return [(r, list(p)) for r, p in pool.queue], window, pool.round, completed, counters, len(s.violations)


class FaultMachine(RuleBasedStateMachine):
    requests = Bundle("requests")

    @initialize(batch=st.integers(1, 3), extra=st.integers(0, 2), k=st.integers(1, 3),
                budget=st.integers(1, BUDGET), eos=st.sampled_from([None, 63, [2, 9]]),
                policy=st.sampled_from(sorted(POLICIES)))
    def start(self, batch, extra, k, budget, eos, policy):
        options = dict(num_draft_tokens=k, max_new_tokens=budget, batch_size=batch, window_size=batch + extra,
                       eos_token_id=eos, check_invariants="record")
        self.faulty = Scheduler(TARGET, DRAFT, steps=faulty_steps(), policy=around("policy", POLICIES[policy]),
                                **options)
        self.shadow = Scheduler(TARGET, DRAFT, policy=POLICIES[policy], **options)
        self.budget, self.eos = budget, eos
        self.expected: dict[int, list[int]] = {}
        self.cancelled: set[int] = set()
        COUNTS["examples"] += 1

    @rule(target=requests, prompt=st.lists(st.integers(2, 95), min_size=1, max_size=5),
          own_budget=st.none() | st.integers(0, BUDGET), own_eos=st.sampled_from(["default", None, 63, 30]))
    def submit(self, prompt, own_budget, own_eos):
        options = {} if own_budget is None else {"max_new_tokens": own_budget}
        if own_eos != "default":
            options["eos_token_id"] = own_eos
        request = self.faulty.submit(prompt, **options)
        assert self.shadow.submit(prompt, **options) == request == len(self.expected)
        limit = self.budget if own_budget is None else own_budget
        eos = self.eos if own_eos == "default" else own_eos
        self.expected[request] = cut_at_eos(continuation(prompt)[:limit], eos)
        return request

    @precondition(lambda self: self.faulty.pending > 0)
    @rule(at=st.integers(0, 30), fault=st.sampled_from(FAULTS))
    def faulty_step(self, at, fault):
        before = fingerprint(self.faulty)
        INJECTOR.arm(at, fault)
        try:
            done = self.faulty.step()
        except fault as raised:
            assert "injected at" in str(raised)
            assert fingerprint(self.faulty) == before  # the failed step left no trace
            return
        finally:
            INJECTOR.armed = False
        COUNTS["steps"] += 1
        assert done.keys() == self.shadow.step().keys()

    @rule()
    def step(self):
        COUNTS["steps"] += 1
        assert self.faulty.step().keys() == self.shadow.step().keys()

    @rule(request=requests)
    def cancel(self, request):
        assert self.faulty.cancel(request) == self.shadow.cancel(request)
        self.cancelled.add(request)

    @precondition(lambda self: self.faulty.pending > 0)
    @rule(at=st.integers(0, 200), fault=st.sampled_from(FAULTS))
    def stream_with_a_fault(self, at, fault):
        """Consume the stream; a fault ends it rolled back, and a second stream resumes."""
        got: dict[int, list[int]] = {}
        INJECTOR.arm(at, fault)
        try:
            for event in self.faulty.stream():
                got.setdefault(event.request, []).extend(event.tokens)
        except fault:
            pass
        finally:
            INJECTOR.armed = False
        for event in self.faulty.stream():
            got.setdefault(event.request, []).extend(event.tokens)
        self.shadow.run()
        for request, tokens in got.items():  # streamed tokens are the tail of the output, each once
            assert self.faulty.completed[request].tokens[-len(tokens):] == tokens

    @invariant()
    def equal_to_the_shadow(self):
        assert fingerprint(self.faulty) == fingerprint(self.shadow)

    @invariant()
    def no_invariant_violated(self):
        assert self.faulty.violations == [] and self.shadow.violations == []

    @invariant()
    def nothing_lost_or_duplicated(self):
        pool = self.faulty.pool
        places = [r for r, _ in pool.queue] + [m.request for m in pool.window] + list(self.faulty.completed)
        assert sorted(places) == sorted(self.expected)

    @invariant()
    def outputs_follow_the_reference(self):
        for member in self.faulty.pool.window:
            tokens = member.output.tokens
            assert member.output.stop is None and tokens == self.expected[member.request][: len(tokens)]
        for request, out in self.faulty.completed.items():
            if out.stop == "cancelled":
                assert request in self.cancelled and out.tokens == self.expected[request][: len(out.tokens)]
            else:
                assert out.tokens == self.expected[request]

    def teardown(self):
        if hasattr(self, "faulty"):
            self.faulty.run()  # nothing submitted is ever lost
            assert self.faulty.pending == 0 and set(self.faulty.completed) == set(self.expected)
            for request, out in self.faulty.completed.items():
                if out.stop != "cancelled":
                    assert out.tokens == self.expected[request]


def run_machine(examples: int, steps: int, **options) -> None:
    with one_thread(), injection_everywhere():
        run_state_machine_as_test(FaultMachine, settings=settings(
            max_examples=examples, stateful_step_count=steps, deadline=None, **options))


#: the CI variant's run, printed as "faults examples" by a fresh interpreter
MACHINE = ("import test_scheduler_faults as t; t.COUNTS.clear(); t.run_machine(60, 20, derandomize=True); "
           "print(t.COUNTS['faults injected'], t.COUNTS['examples'])")


@pytest.mark.slow
def test_fault_machine():
    """CI variant: about 15 s on one core, about 100 faults injected; derandomized,
    so that the count below is the same on every run (a random draw once gave 25).
    It runs in a fresh interpreter: after the rest of the suite in the same process
    the same derandomized machine injected 21 faults (some state an earlier test
    leaves changes its path; not yet found), which a count cannot tell from a
    machine that lost its injection points."""
    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), str(here.parent)]))
    run = subprocess.run([sys.executable, "-c", MACHINE], cwd=here, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    faults, examples = map(int, run.stdout.split()[-2:])
    assert faults >= 30 and examples >= 60, (faults, examples)


def test_fault_machine_catches_a_step_without_rollback(monkeypatch):
    """Negative control: with ``Pool.restore`` a no-op (a failed step keeps
    what it did, the defect the issue reproduced) the machine fails."""
    monkeypatch.setattr(scheduler_module.Pool, "restore", lambda pool, snapshot: None)
    with pytest.raises(AssertionError):
        run_machine(60, 20, phases=[Phase.generate])


@pytest.mark.exhaustive
def test_fault_machine_many_interleavings(capsys):
    COUNTS.clear()
    run_machine(1500, 25)
    with capsys.disabled():
        print("\nfault machine:", dict(sorted(COUNTS.items())))
    assert COUNTS["faults injected"] >= 1000
