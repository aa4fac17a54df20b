"""The broken alternatives (Paper §5) as methods of ``batchspec.generate``.

Each baseline is checked against the paper's account of it: where it fails,
which invariant names the failure and at which round, and (rollback) that
being rectangular the honest way is exact but wasteful. Rounds are predicted
from a correct EQSPEC run on the same inputs: a baseline does exactly what
EQSPEC does until its flaw first matters.
"""

from __future__ import annotations


import pytest
import torch

from _broken_helpers import (K, N, RAGGED_AT_2, WITH_PAD_ID, correct_run, first_ragged_round,  # noqa: F401
                             one_thread, pair, reference)

import batchspec
from batchspec.reference.draft_policy import Fixed
from batchspec.api import DecodeConfig
from batchspec.reference import Models
from batchspec.reference.baselines import masking


def run(method, prompts, family="qwen3", check="record", batch_size=None, eos=None):
    target, draft = pair(family)
    return batchspec.generate(target, draft, prompts, method=method, num_draft_tokens=K, max_new_tokens=N,
                              batch_size=batch_size, check_invariants=check, eos_token_id=eos)


def test_baselines_are_registered_methods():
    assert {"masking", "rollback", "dsd"} <= set(batchspec.METHODS)
    assert all(batchspec.METHODS[m].needs_draft for m in ("masking", "rollback", "dsd"))


# --- rollback: rectangular, exact, wasteful --------------------------------------------------

@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_rollback_is_exact_and_passes_every_invariant(family):
    result = run("rollback", RAGGED_AT_2, family, check="semantic")  # raises at any violation
    assert result.sequences == reference(family, RAGGED_AT_2)
    assert result.violations == []


def test_rollback_counts_the_verified_tokens_it_throws_away():
    result = run("rollback", RAGGED_AT_2)
    first, second = result.stats.per_round[:2]
    # Round 1 is EQSPEC's round 1 (every row commits k + 1 = 4): nothing to cut.
    assert (first.appended, first.wasted) == ([4, 4, 4], [0, 0, 0])
    # Round 2 starts from EQSPEC's state after round 1, where rows verify 4, 2 and 2
    # tokens; rollback keeps the minimum, 2, and throws away 2 verified tokens of row 0.
    assert correct_run("qwen3", RAGGED_AT_2).stats.per_round[1].appended == [4, 2, 2]
    assert (second.appended, second.wasted) == ([2, 2, 2], [2, 0, 0])
    assert result.stats.wasted_tokens == sum(sum(r.wasted) for r in result.stats.per_round) >= 2
    assert result.stats.as_dict()["wasted_tokens"] == result.stats.wasted_tokens
    # every round, the rows that stay commit the same count: no cache row ever shifts
    for t, rec in enumerate(result.stats.per_round[:-1]):
        staying = set(result.stats.per_round[t + 1].requests)
        assert len({a for r, a in zip(rec.requests, rec.appended) if r in staying}) == 1
    eqspec = correct_run("qwen3", RAGGED_AT_2).stats
    assert result.stats.tokens_per_target_call < eqspec.tokens_per_target_call


def test_rollback_stops_at_eos_exactly():
    """EOS inside the cut-off part of a row is not an EOS generated: the row goes on."""
    eos = [31, 59]
    expected = [s[: next((j + 1 for j, t in enumerate(s) if t in eos), len(s))]
                 for s in reference("qwen3", WITH_PAD_ID)]
    result = run("rollback", WITH_PAD_ID, check=True, eos=eos)
    assert result.sequences == expected
    assert result.stop_reasons == ["eos" if s[-1] in eos else "length" for s in expected]


def test_rollback_wastes_nothing_at_batch_1():
    result = run("rollback", RAGGED_AT_2, batch_size=1)
    assert result.stats.wasted_tokens == 0
    assert result.sequences == reference("qwen3", RAGGED_AT_2)


# --- masking (BSP-style): exact until the batch turns ragged ---------------------------------

def test_masking_is_exact_at_batch_1():
    result = run("masking", RAGGED_AT_2, check="semantic", batch_size=1)
    assert result.sequences == reference("qwen3", RAGGED_AT_2)


def test_masking_raises_I1_at_the_first_ragged_round():
    ragged = first_ragged_round(correct_run("qwen3", RAGGED_AT_2), RAGGED_AT_2)
    assert ragged == 2
    with pytest.raises(batchspec.InvariantViolation) as caught:
        run("masking", RAGGED_AT_2, check=True)
    v = caught.value
    assert (v.invariant, v.round, v.step) == ("I1", ragged, "realign")
    # the rows that accepted fewer than the most now have holes: p_i + c_i < L
    assert v.actual["p_i"] + v.actual["c_i"] < 4 + 4 + 4 + 2  # L after round 2: 6 + 4 + 4


def test_masking_record_mode_timeline_and_drift():
    result = run("masking", RAGGED_AT_2, check="record")
    timeline = [(v.invariant, v.round, v.step) for v in result.violations]
    assert timeline[0] == ("I1", 2, "realign") and all(r >= 2 for _, r, _ in timeline)
    # the next round's first call feeds positions past the hole (Spec §3.2)
    assert ("I2", 3, "draft") in timeline
    # it ran to the end, and the output drifted from the target's greedy output
    assert len(result.sequences) == 3 and all(len(s) == N for s in result.sequences)
    assert result.sequences != reference("qwen3", RAGGED_AT_2)


def test_masking_observation_records_its_real_holes():
    """The invariants see the mask the baseline holds, holes included, and its caches
    holding every slot (rejected drafts too: nothing is ever moved)."""
    target, draft = pair("qwen3")
    config = DecodeConfig(k=Fixed(K), max_new_tokens=N, eos=None, batch_size=3)
    decoder = masking.decode(Models(target, draft), RAGGED_AT_2, [0, 1, 2], config)
    with torch.no_grad():
        event = next(e for e in decoder if e.step == "realign" and e.state.round == 2)
    obs = event.observe()
    holes = [(row == 0).nonzero().flatten().tolist() for row in obs.mask]
    assert any(h and max(h) > obs.pad[i] for i, h in enumerate(holes))  # a zero after content
    assert obs.caches["target"].length == obs.caches["draft"].length == obs.width - 1
    assert sum(obs.length) < obs.width * 3 - sum(obs.pad)


# --- dsd: fails from the first rejection, even at batch 1 ------------------------------------

@pytest.mark.parametrize("prompt", RAGGED_AT_2)
def test_dsd_raises_I5_at_batch_1_at_the_round_of_its_first_wrong_token(prompt):
    """At a rejection the draft's token is the one the target just rejected, so the
    first rejection is wrong for sure; after a fully accepted round the draft's extra
    token may happen to agree. I5 fires at the round that commits the first token
    that differs from the target's greedy output, and not before."""
    recorded = run("dsd", [prompt], check="record")
    expected = reference("qwen3", [prompt])[0]
    wrong = next(j for j, (x, y) in enumerate(zip(recorded.sequences[0], expected)) if x != y)
    ends = torch.tensor([r.appended[0] for r in recorded.stats.per_round]).cumsum(0)
    round_of_wrong = int((ends <= wrong).sum()) + 1
    correct = correct_run("qwen3", [prompt]).stats.per_round
    rejected = [r.round for r in correct if r.accepted[0] < r.drafted]
    assert not rejected or round_of_wrong <= rejected[0]
    with pytest.raises(batchspec.InvariantViolation) as caught:
        run("dsd", [prompt], check=True)
    v = caught.value
    assert (v.invariant, v.round, v.step) == ("I5", round_of_wrong, "verify")
    assert (v.expected, v.actual) == (expected[wrong], recorded.sequences[0][wrong])


def test_dsd_output_is_wrong_at_batch_1():
    result = run("dsd", RAGGED_AT_2, batch_size=1)
    assert result.sequences != reference("qwen3", RAGGED_AT_2)
    assert {v.invariant for v in result.violations} == {"I5"}  # no padding at B = 1: I1-I4 hold


def test_dsd_attends_padding_from_the_prefill():
    with pytest.raises(batchspec.InvariantViolation) as caught:
        run("dsd", RAGGED_AT_2, check=True)  # prompts of unequal length: rows are padded
    assert (caught.value.invariant, caught.value.round, caught.value.step) == ("I1", 0, "prefill")
