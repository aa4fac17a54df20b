"""The online Scheduler's contract, case by case (Spec §8.6): the faults the
issue reproduced as named regressions, checked policy selections,
per-request budgets and EOS, cancel, and the stream of committed tokens."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from batchspec.models import tiny
from batchspec.reference import exspec_pool
from batchspec.reference.exspec import EXSPEC_STEPS
from batchspec.scheduler import Committed, Scheduler, policy_problem
from batchspec.testing import reference_greedy

TARGET, DRAFT = tiny.pair("llama", "perturbed")
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]


def failing(fn, fault, at: int = 1):
    """``fn`` that raises ``fault`` on its ``at``-th call, after doing its work, and works otherwise."""
    calls = []

    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        calls.append(1)
        if len(calls) == at:
            raise fault
        return out

    return wrapped


def make(**options) -> Scheduler:
    options = {"num_draft_tokens": 3, "max_new_tokens": 8, "batch_size": 2, "check_invariants": True, **options}
    return Scheduler(TARGET, DRAFT, **options)


def test_a_failed_prefill_loses_no_request():
    """Regression: requests left the queue before their prefill ran; a
    KeyboardInterrupt there lost them (neither queued, nor in the window, nor completed)."""
    steps = dataclasses.replace(EXSPEC_STEPS, prefill=failing(EXSPEC_STEPS.prefill, KeyboardInterrupt()))
    s = make(steps=steps)
    ids = [s.submit(p) for p in PROMPTS]
    with pytest.raises(KeyboardInterrupt):
        s.step()
    assert [r for r, _ in s.pool.queue] == ids and s.pool.window == [] and s.completed == {}
    assert s.stats.rounds == 0 and s.pool.round == 0
    s.run()
    assert [s.completed[r].tokens for r in ids] == [reference_greedy(TARGET, p, 8) for p in PROMPTS]


def test_a_step_failing_after_its_commit_duplicates_nothing():
    """Regression: a round's tokens were written to the outputs before the pool
    settled; ``release`` raising once (its second call: after the commit of
    round 1) gave 11 tokens for max_new_tokens=8, three of them repeated."""
    steps = dataclasses.replace(EXSPEC_STEPS, release=failing(exspec_pool.release, RuntimeError("boom"), at=2))
    s = make(steps=steps, batch_size=1)
    request = s.submit(PROMPTS[0])
    with pytest.raises(RuntimeError, match="boom"):
        s.step()
    assert [r for r, _ in s.pool.queue] == [request] and s.pool.round == 0 and s.stats.target_calls == 0
    s.step()
    assert len(s.pool.window[0].output.tokens) == s.stats.per_round[0].appended[0]
    s.run()
    assert s.completed[request].tokens == reference_greedy(TARGET, PROMPTS[0], 8)


def test_a_step_failing_after_release_leaves_every_member_cache_as_it_was():
    """Release extends a member's cache storage in place past its old length
    (Spec §8.3); the snapshot's members must still read exactly what they did
    before the failed step: the same slots, the same bytes."""
    calls = []

    def release_then_fail(state, grid, length, rows):
        out = exspec_pool.release(state, grid, length, rows)
        calls.append(1)
        if len(calls) == 3:  # round 2's release, after round 1's members grew in place
            raise RuntimeError("boom")
        return out

    s = make(steps=dataclasses.replace(EXSPEC_STEPS, release=release_then_fail), batch_size=2)
    ids = [s.submit(p) for p in PROMPTS[:2]]
    s.step()

    def caches():
        return [[(m.request, r.length, r.stacked().clone()) for r in (m.target_kv, m.draft_kv)] for m in s.pool.window]

    before = caches()
    with pytest.raises(RuntimeError, match="boom"):
        s.step()
    after = caches()
    assert [[(q, n) for q, n, _ in m] for m in after] == [[(q, n) for q, n, _ in m] for m in before]
    assert all(torch.equal(a[2], b[2]) for ma, mb in zip(after, before) for a, b in zip(ma, mb))
    s.run()
    assert [s.completed[r].tokens for r in ids] == [reference_greedy(TARGET, p, 8) for p in PROMPTS[:2]]


def bad(selection):
    def policy(window, batch_size):
        return selection(window, batch_size)

    policy.__name__ = "my_policy"
    return policy


@pytest.mark.parametrize("selection, problem", [
    (lambda w, b: [0, 0], "index 0 chosen twice"),
    (lambda w, b: [], "an empty batch"),
    (lambda w, b: [len(w)], "index 3 out of range"),
    (lambda w, b: [-1], "index -1 out of range"),
    (lambda w, b: list(range(b + 1)), "more than batch_size 2"),
    (lambda w, b: None, "a list of member indices"),
    (lambda w, b: [0.0], "a list of member indices"),
])
def test_a_policy_returning_a_non_batch_is_refused_and_changes_nothing(selection, problem):
    s = make(policy=bad(selection), window_size=3)
    for p in PROMPTS[:3]:
        s.submit(p)
    with pytest.raises(ValueError, match=f"policy my_policy returned .*{problem}"):
        s.step()
    assert [r for r, _ in s.pool.queue] == [0, 1, 2] and s.pool.window == [] and s.stats.rounds == 0


def test_policy_problem_is_silent_on_valid_selections():
    assert [policy_problem(c, 4, 2) for c in ([0], [3, 1], (2,))] == [None, None, None]


def test_per_request_budgets_and_eos():
    s = make(eos_token_id=None)
    free = reference_greedy(TARGET, PROMPTS[2], 8)
    eos = free[2]  # a token this prompt's continuation emits
    ids = [s.submit(PROMPTS[0], max_new_tokens=3), s.submit(PROMPTS[1]), s.submit(PROMPTS[2], eos_token_id=eos),
           s.submit(PROMPTS[3], max_new_tokens=0)]
    assert s.completed[ids[3]].tokens == [] and s.completed[ids[3]].stop == "length"
    s.run()
    out = {r: (s.completed[r].tokens, s.completed[r].stop) for r in ids}
    assert out[ids[0]] == (reference_greedy(TARGET, PROMPTS[0], 3), "length")
    assert out[ids[1]] == (reference_greedy(TARGET, PROMPTS[1], 8), "length")
    assert out[ids[2]] == (free[: free.index(eos) + 1], "eos")


def test_a_request_may_ask_for_more_than_the_default():
    s = make(max_new_tokens=2)
    request = s.submit(PROMPTS[0], max_new_tokens=7)
    assert s.run()[request].tokens == reference_greedy(TARGET, PROMPTS[0], 7)


def test_cancel():
    s = make(batch_size=1, window_size=1)
    running, queued = s.submit(PROMPTS[0]), s.submit(PROMPTS[1])
    s.step()
    assert s.cancel(queued) is True and s.completed[queued].tokens == [] and s.completed[queued].stop == "cancelled"
    assert s.cancel(running) is True
    partial = s.completed[running].tokens
    assert 0 < len(partial) < 8 and partial == reference_greedy(TARGET, PROMPTS[0], 8)[: len(partial)]
    assert s.pending == 0 and not s.pool.active and s.step() == {}
    assert s.cancel(running) is False
    with pytest.raises(ValueError, match="no request 7"):
        s.cancel(7)


def test_stream_yields_each_committed_token_once_in_order():
    s = make()
    ids = [s.submit(p) for p in PROMPTS]
    events = list(s.stream())
    assert all(isinstance(e, Committed) and e.tokens for e in events)
    for r in ids:
        mine = [e for e in events if e.request == r]
        assert [t for e in mine for t in e.tokens] == s.completed[r].tokens == reference_greedy(TARGET, PROMPTS[r], 8)
        assert [e.stop for e in mine] == [None] * (len(mine) - 1) + ["length"]


def test_bad_scheduler_settings_are_refused():
    with pytest.raises(ValueError, match="batch_size must be an int, got NoneType"):
        Scheduler(TARGET, DRAFT, batch_size=None)
    with pytest.raises(TypeError, match="policy must be a function"):
        Scheduler(TARGET, DRAFT, policy="laggards_first")
    s = make()
    for options, message in (({"max_new_tokens": -1}, "max_new_tokens must be >= 0"),
                             ({"eos_token_id": 500}, "eos_token_id: 500 is not a token id"),
                             ({"max_new_tokens": 300}, "context window of 256")):
        with pytest.raises(ValueError, match=message):
            s.submit(PROMPTS[0], **options)
    assert s.pending == 0 and not s.requests


def test_a_step_in_inference_mode_then_one_outside_it_both_run():
    """Regression (review): a step under ``torch.inference_mode()`` left
    inference tensors as member caches and batch storage; the next step,
    outside it, wrote them in place and raised on every retry."""
    s = make()
    ids = [s.submit(p) for p in PROMPTS[:2]]
    with torch.inference_mode():
        s.step()
    s.run()
    assert [s.completed[r].tokens for r in ids] == [reference_greedy(TARGET, p, 8) for p in PROMPTS[:2]]
