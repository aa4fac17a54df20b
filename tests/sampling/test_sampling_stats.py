"""Statistics under sampling: per-position acceptance, mean acceptance length,
and tokens per target call beside the expectation from the recorded α."""

from __future__ import annotations

import pytest

import batchspec
from batchspec.reference.eqspec import RoundRecord
from batchspec.stats import Stats
from batchspec.testing import random_prompts

PROMPTS = random_prompts(seed=2, count=6)


def test_formulas_on_hand_made_records():
    stats = Stats("eqspec")
    stats.per_round = [RoundRecord(1, [0, 1], 2, [2, 0], [3, 1], 5, True, alpha=[[0.5, 0.5], [1.0, 0.0]]),
                       RoundRecord(2, [0], 2, [1], [2], 6, False, alpha=[[0.25, 1.0]])]
    # slot 0 reached by all three row-rounds, accepted by two; slot 1 reached by two, accepted by one
    assert stats.per_position_acceptance == [2 / 3, 1 / 2]
    assert stats.mean_acceptance_length == 1.0
    # Σ_j Π_{i<j} α_i per row-round: 1 + .5 + .25, 1 + 1 + 0, 1 + .25 + .25
    assert stats.expected_tokens_per_target_call == pytest.approx((1.75 + 2.0 + 1.5) / 3)
    assert stats.mean_alpha == pytest.approx([(0.5 + 1.0 + 0.25) / 3, (0.5 + 0.0 + 1.0) / 3])


def test_self_draft_accepts_everything(pairs):
    """p = q: α = 1 at every slot, every draft accepted, k' + 1 tokens expected per call."""
    target, draft = pairs("llama", "self")
    result = batchspec.generate(target, draft, PROMPTS, num_draft_tokens=3, max_new_tokens=8, do_sample=True)
    stats = result.stats
    assert stats.per_position_acceptance == [1.0, 1.0, 1.0]
    assert stats.mean_alpha == pytest.approx([1.0] * 3, abs=1e-12)
    assert stats.expected_tokens_per_target_call == pytest.approx(4.0, abs=1e-9)
    assert stats.tokens_per_target_call == 4.0  # two rounds of k' + 1 = 4 fill the budget of 8


def test_sampled_run_reports_and_greedy_does_not(pairs):
    target, draft = pairs("qwen3", "unrelated")
    sampled = batchspec.generate(target, draft, PROMPTS, num_draft_tokens=4, max_new_tokens=12, do_sample=True).stats
    assert len(sampled.per_position_acceptance) == 4
    assert all(0 <= a <= 1 for a in sampled.per_position_acceptance + sampled.mean_alpha)
    assert 1 <= sampled.expected_tokens_per_target_call <= 5
    assert sampled.mean_acceptance_length == pytest.approx(sampled.accepted_tokens / sampled.row_rounds)
    summary = sampled.as_dict()
    assert summary["expected_tokens_per_target_call"] == sampled.expected_tokens_per_target_call
    greedy = batchspec.generate(target, draft, PROMPTS, num_draft_tokens=4, max_new_tokens=12).stats
    assert greedy.expected_tokens_per_target_call is None and greedy.mean_alpha == []
    # greedy reports acceptance too; slots no row reached (every earlier draft accepted) are absent
    assert 1 <= len(greedy.per_position_acceptance) <= 4
