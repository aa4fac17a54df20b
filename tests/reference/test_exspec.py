"""EXSPEC (Spec §8): exact against the target's batch-1 greedy generate, with
every invariant checked after every step; its statistics; bad input.

float64 tiny pairs of the paper's three families. The prompt set mixes a
group of equal lengths (batches form without realignment) with scattered
lengths (the fallback realigns), so at batch sizes above 1 both paths run.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import batchspec
from batchspec.models.tiny import PAPER_FAMILIES
from batchspec.invariants import InvariantViolation
from batchspec.reference import exspec_pool, model_call
from batchspec.reference.exspec import EXSPEC_STEPS
from batchspec.reference.exspec_policy import POLICIES
from batchspec.reference.rows import split
from batchspec.reference.storage import layer_tensors
from batchspec.scheduler import Scheduler
from batchspec.stats import Stats
from batchspec.testing import random_prompts

from _spec_helpers import one_thread

NEW = 12
# four prompts of length 6, four scattered ones (1..40), one of a single token
PROMPTS = random_prompts(seed=3, count=4, low=6, high=6) + random_prompts(seed=7, count=4) + [[42]]
DRAFT_FOR = {1: "self", 2: "perturbed", 3: "unrelated", 4: "perturbed", 5: "perturbed"}
# (batch, k): batch sizes 1-5 and 8, every k in 1..5, the three draft kinds
CASES = [(1, 2), (2, 4), (3, 1), (4, 5), (5, 3), (8, 2)]


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def expected(greedy_reference, target, prompts, n=NEW, eos=None):
    return [greedy_reference(target, p, n, eos) for p in prompts]


@pytest.mark.slow_except('4-5-llama')
@pytest.mark.parametrize("family", PAPER_FAMILIES)
@pytest.mark.parametrize("batch_size,k", CASES)
def test_exspec_equals_batch1_greedy(pairs, greedy_reference, family, batch_size, k):
    target, draft = pairs(family, DRAFT_FOR[k])
    result = batchspec.generate(target, draft, PROMPTS, method="exspec", num_draft_tokens=k,
                                max_new_tokens=NEW, batch_size=batch_size, check_invariants=True)
    assert result.sequences == expected(greedy_reference, target, PROMPTS)
    assert result.stop_reasons == ["length"] * len(PROMPTS)
    # every prompt was served, never more than B rows at once
    served = {r for rec in result.stats.per_round for r in rec.requests}
    assert served == set(range(len(PROMPTS)))
    assert all(len(rec.requests) <= batch_size for rec in result.stats.per_round)


@pytest.mark.slow_except('several-llama')
@pytest.mark.parametrize("family", PAPER_FAMILIES)
@pytest.mark.parametrize("where", [0, 2, "several"])
def test_eos_cut_matches_generate(pairs, greedy_reference, family, where):
    target, draft = pairs(family, "perturbed")
    ref = greedy_reference(target, PROMPTS[0], NEW)
    eos = [ref[5], ref[3], 95] if where == "several" else ref[where]
    result = batchspec.generate(target, draft, PROMPTS, method="exspec", num_draft_tokens=3,
                                max_new_tokens=NEW, batch_size=3, eos_token_id=eos, check_invariants=True)
    assert result.sequences == expected(greedy_reference, target, PROMPTS, eos=eos)
    ids = eos if isinstance(eos, list) else [eos]
    assert result.sequences[0][-1] in ids and result.stop_reasons[0] == "eos"
    for seq, reason in zip(result.sequences, result.stop_reasons):
        assert reason == ("eos" if seq[-1] in ids else "length")


@pytest.mark.slow_except('4-*')
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("window", [3, 4, 9])
def test_every_policy_and_window_is_exact(pairs, greedy_reference, policy, window):
    """Exactness never depends on which members form a batch; W = B (the
    window is the batch) and W >= #prompts (all admitted at once) included."""
    target, draft = pairs("qwen3", "perturbed")
    scheduler = Scheduler(target, draft, num_draft_tokens=3, max_new_tokens=NEW, batch_size=3,
                          window_size=window, check_invariants=True, policy=POLICIES[policy])
    ids = [scheduler.submit(p) for p in PROMPTS]
    outputs = scheduler.run()
    assert ids == list(range(len(PROMPTS)))
    assert [outputs[r].tokens for r in ids] == expected(greedy_reference, target, PROMPTS)
    assert scheduler.pending == 0 and scheduler.violations == []


@pytest.mark.slow
def test_semantic_cache_check_on_grouped_and_fallback_rounds(pairs, greedy_reference):
    """Every cached key/value, recomputed from scratch after every step, in a
    run where batches both form from a group and fall back."""
    target, draft = pairs("glm4", "perturbed")
    result = batchspec.generate(target, draft, PROMPTS, method="exspec", num_draft_tokens=3,
                                max_new_tokens=8, batch_size=2, check_invariants="semantic")
    assert result.sequences == expected(greedy_reference, target, PROMPTS, 8)
    assert 0 < result.stats.fallbacks < result.stats.rounds


def test_unsorted_prompts_and_edge_budgets(pairs, greedy_reference):
    target, draft = pairs("llama", "perturbed")
    for n in (1, 2):
        result = batchspec.generate(target, draft, PROMPTS, method="exspec", max_new_tokens=n,
                                    batch_size=4, sort_by_length=False, check_invariants=True)
        assert result.sequences == expected(greedy_reference, target, PROMPTS, n)
    result = batchspec.generate(target, draft, PROMPTS[:3], method="exspec", max_new_tokens=0)
    assert result.sequences == [[], [], []] and result.stats.rounds == 0


@pytest.mark.parametrize("sort_by_length", [True, False])
def test_sort_by_length_orders_admission(pairs, sort_by_length):
    """With W = B = 1 requests are served one after the other, in admission order."""
    target, draft = pairs("llama", "perturbed")
    result = batchspec.generate(target, draft, PROMPTS, method="exspec", max_new_tokens=2, batch_size=1,
                                window_size=1, sort_by_length=sort_by_length)
    served = list(dict.fromkeys(r for rec in result.stats.per_round for r in rec.requests))
    order = list(range(len(PROMPTS)))
    shortest_first = sorted(order, key=lambda r: len(PROMPTS[r]))
    assert shortest_first != order  # the two orders differ on these prompts
    assert served == (shortest_first if sort_by_length else order)


def test_prompts_of_one_token_start_with_empty_caches(pairs, greedy_reference):
    target, draft = pairs("llama", "perturbed")
    prompts = [[5], [17], [60], [8, 9]]
    result = batchspec.generate(target, draft, prompts, method="exspec", num_draft_tokens=3,
                                max_new_tokens=NEW, batch_size=3, check_invariants=True)
    assert result.sequences == expected(greedy_reference, target, prompts)


# --- the invariants watch EXSPEC's own moves (faults swapped in through the Steps hook) --------

def run_with(pairs, steps, check, prompts=PROMPTS, batch_size=2):
    target, draft = pairs("llama", "perturbed")
    scheduler = Scheduler(target, draft, num_draft_tokens=3, max_new_tokens=10, batch_size=batch_size,
                          check_invariants=check, steps=steps)
    for p in prompts:
        scheduler.submit(p)
    return scheduler.run()


def release_by_position(state, grid, length, rows):
    """Regression (found while writing EXSPEC): the j-th released member took
    cache row j instead of batch row rows[j], wrong as soon as a row before
    it had finished. Shapes are right, so only the semantic I3 sees it."""
    members = exspec_pool.release(state, grid, length, rows)
    for j, (member, b) in enumerate(zip(members, rows)):
        span = [(j, int(state.pad[b]), int(state.pad[b]) + length[b] - 1)]
        member.target_kv = split(state.target_cache, span)[0]
        member.draft_kv = split(state.draft_cache, span)[0]
    return members


@pytest.mark.slow
def test_release_from_the_wrong_row_is_caught_by_semantic_i3(pairs, greedy_reference):
    steps = dataclasses.replace(EXSPEC_STEPS, release=release_by_position)
    with pytest.raises(InvariantViolation) as caught:
        run_with(pairs, steps, "semantic")
    assert caught.value.invariant == "I3" and caught.value.step == "realign"
    with pytest.raises(InvariantViolation) as default:  # the default checks see it too, by provenance
        run_with(pairs, steps, True)
    assert (default.value.invariant, default.value.step) == ("I6", "realign")
    assert default.value.round == caught.value.round
    outputs = run_with(pairs, steps, "structural")  # structurally fine, and wrong
    target, _ = pairs("llama", "perturbed")
    assert [outputs[r].tokens for r in range(len(PROMPTS))] != expected(greedy_reference, target, PROMPTS, 10)


def form_without_shift(models, members, round_, reuse=(None, None)):
    """Left-pads the tokens but leaves every cache row flush left: the δ_i
    shift of the fallback is forgotten."""
    state, realigned = exspec_pool.form(models, members, round_, reuse)
    for cache in (state.target_cache, state.draft_cache):
        for keys, values in layer_tensors(cache):
            for b, p in enumerate(state.pad.tolist()):
                keys[b] = torch.roll(keys[b], -p, dims=1)
                values[b] = torch.roll(values[b], -p, dims=1)
    return state, realigned


def test_fallback_without_cache_shift_is_caught_by_semantic_i3(pairs):
    with pytest.raises(InvariantViolation) as caught:
        run_with(pairs, dataclasses.replace(EXSPEC_STEPS, form=form_without_shift), "semantic")
    assert caught.value.invariant == "I3" and caught.value.step == "realign"
    assert caught.value.model == "target" and "fresh single-sequence forward" in str(caught.value)


def release_one_slot_long(state, grid, length, rows):
    """Keeps the newest token's (not yet computed) target slot in the member's cache."""
    members = exspec_pool.release(state, grid, length, rows)
    for member, b in zip(members, rows):
        p = int(state.pad[b])
        member.target_kv = split(state.target_cache, [(b, p, p + length[b])])[0]
    return members


def test_release_with_a_cache_slot_too_many_is_caught_by_i3(pairs):
    with pytest.raises(InvariantViolation) as caught:
        run_with(pairs, dataclasses.replace(EXSPEC_STEPS, release=release_one_slot_long), True)
    assert caught.value.invariant == "I3" and caught.value.step == "realign"
    assert "L - 1" in str(caught.value)


# --- statistics -------------------------------------------------------------------------------

def test_equal_lengths_and_equal_acceptance_never_realign(pairs):
    """The target as its own draft accepts all k' every round, so equal-length
    prompts stay equal: every batch is a group, nothing is realigned
    (paper Corollaries B.2/B.3), and no time is booked to alignment."""
    target, draft = pairs("llama", "self")
    prompts = PROMPTS[:4]
    result = batchspec.generate(target, draft, prompts, method="exspec", num_draft_tokens=3,
                                max_new_tokens=NEW, batch_size=2, check_invariants=True)
    stats = result.stats
    assert stats.group_rate == 1.0 and stats.fallbacks == 0 and stats.realignments == 0
    assert stats.realignment_seconds == 0.0
    assert all(rec.padding == 0 and rec.grouped for rec in stats.per_round)


def test_fallbacks_padding_and_waiting_are_recorded(pairs):
    target, draft = pairs("llama", "unrelated")
    result = batchspec.generate(target, draft, PROMPTS, method="exspec", num_draft_tokens=3,
                                max_new_tokens=NEW, batch_size=2, window_size=4)
    stats = result.stats
    records = stats.per_round
    assert stats.fallbacks == stats.realignments == sum(not r.grouped for r in records) > 0
    assert stats.group_rate == pytest.approx(1 - stats.fallbacks / stats.rounds)
    assert stats.realignment_seconds > 0
    assert all((r.padding > 0) == r.realigned for r in records)
    # waiting: every request, each round it was queued or in the window but not in the batch
    waited = stats.waiting_rounds
    assert set(waited) == set(range(len(PROMPTS)))
    assert sum(waited.values()) == sum(len(r.waiting) for r in records) > 0
    assert all(not set(r.waiting) & set(r.requests) for r in records)
    # all were submitted at the start, so each waited every round before its last that it was not in
    last = {q: i for i, r in enumerate(records) for q in r.requests}
    assert waited == {q: last[q] + 1 - sum(q in r.requests for r in records) for q in last}
    assert all(r.seconds > 0 for r in records)
    assert sum(r.seconds for r in records) <= stats.wall_seconds
    for request, seconds in stats.waiting_seconds.items():
        assert seconds == pytest.approx(sum(r.seconds for r in records if request in r.waiting))
    percentiles = stats.waiting_percentiles()
    assert percentiles["rounds"][50] <= percentiles["rounds"][90] <= percentiles["rounds"][99]
    assert percentiles["rounds"][99] <= max(waited.values())


def test_waiting_percentiles_literal():
    class Record:  # only what the waiting statistics read
        def __init__(self, requests, waiting, seconds):
            self.requests, self.waiting, self.seconds = requests, waiting, seconds

    stats = Stats("exspec", per_round=[Record([0], [1, 2], 1.0), Record([1], [2], 2.0), Record([2], [], 4.0)])
    assert stats.waiting_rounds == {0: 0, 1: 1, 2: 2}
    assert stats.waiting_seconds == {0: 0.0, 1: 1.0, 2: 3.0}
    assert stats.waiting_percentiles((50, 100)) == {"rounds": {50: 1.0, 100: 2.0},
                                                    "seconds": {50: 1.0, 100: 3.0}}
    assert Stats("eqspec").waiting_percentiles() == {"rounds": {}, "seconds": {}}


def test_waiting_of_methods_without_waiting_lists():
    """EQSPEC's static batches: requests of a later batch wait for the earlier ones."""
    class Record:
        def __init__(self, requests):
            self.requests = requests

    stats = Stats("eqspec", per_round=[Record([0, 1]), Record([0]), Record([2, 3]), Record([3])])
    assert stats.waiting_rounds == {0: 0, 1: 0, 2: 2, 3: 2}
    assert stats.waiting_seconds == {}


# --- online use -------------------------------------------------------------------------------

def test_requests_arriving_while_it_runs(pairs, greedy_reference):
    target, draft = pairs("qwen3", "perturbed")
    scheduler = Scheduler(target, draft, num_draft_tokens=2, max_new_tokens=NEW, batch_size=2,
                          check_invariants=True)
    assert scheduler.step() == {} and scheduler.stats.rounds == 0  # nothing pending: no round
    first = [scheduler.submit(p) for p in PROMPTS[:3]]
    for _ in range(3):
        scheduler.step()
    rounds_before = scheduler.stats.rounds
    late = [scheduler.submit(p) for p in PROMPTS[3:6]]
    finished = {}
    while scheduler.pending:
        done = scheduler.step()
        assert not set(done) & set(finished)  # a request completes once
        finished.update(done)
    assert first + late == list(range(6))
    assert [scheduler.completed[r].tokens for r in first + late] == expected(
        greedy_reference, target, PROMPTS[:6])
    # a request waits only once it has been submitted
    for record in scheduler.stats.per_round[:rounds_before]:
        assert not set(record.waiting) & set(late)
    assert scheduler.stats.generated_tokens == 6 * NEW


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("window", [1, 0, -2, 2.5, "4", True])
def test_bad_window_size_is_refused_before_any_model_runs(pairs, monkeypatch, window):
    target, draft = pairs("llama", "perturbed")

    def no_forward(*args, **kwargs):
        raise AssertionError("a model ran before the input was checked")

    monkeypatch.setattr(model_call, "run_forward", no_forward)
    with pytest.raises(ValueError, match="window_size"):
        batchspec.generate(target, draft, PROMPTS, method="exspec", batch_size=2, window_size=window)
    with pytest.raises(ValueError, match="window_size"):
        Scheduler(target, draft, batch_size=2, window_size=window)


def test_scheduler_refuses_bad_requests_and_settings(pairs):
    target, draft = pairs("llama", "perturbed")
    with pytest.raises(ValueError, match="num_draft_tokens"):
        Scheduler(target, draft, num_draft_tokens=0)
    with pytest.raises(ValueError, match="draft"):
        Scheduler(target, None)
    scheduler = Scheduler(target, draft, batch_size=2)
    for prompt in ([], [96], [3, -1], "abc"):
        with pytest.raises(ValueError, match="prompts"):
            scheduler.submit(prompt)
    assert scheduler.pending == 0 and not scheduler.pool.queue
