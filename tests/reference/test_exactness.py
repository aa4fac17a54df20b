"""Differential exactness: EQSPEC equals the target's own batch-1 greedy generate.

float64 on CPU with SDPA, where an algorithmic bug cannot hide behind rounding
(Spec §5.2). Every run checks every invariant after every step.
"""

from __future__ import annotations

import pytest

import batchspec
from batchspec.models.tiny import PAPER_FAMILIES
from batchspec.testing import random_prompts

NEW = 16
PROMPTS = random_prompts(seed=7, count=8)  # lengths 1..40
# draft kinds rotate over (batch, k) so high, mixed and low acceptance all occur
DRAFT_FOR = {1: "self", 3: "perturbed", 5: "unrelated"}


@pytest.mark.slow_except('3-3-llama', '1-8-qwen3')
@pytest.mark.parametrize("family", PAPER_FAMILIES)
@pytest.mark.parametrize("batch_size", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_eqspec_equals_batch1_greedy(pairs, greedy_reference, family, batch_size, k):
    draft_kind = DRAFT_FOR[k] if batch_size != 4 else "perturbed"
    target, draft = pairs(family, draft_kind)
    result = batchspec.generate(target, draft, PROMPTS, num_draft_tokens=k, max_new_tokens=NEW,
                                batch_size=batch_size, check_invariants=True)
    expected = [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert result.sequences == expected
    assert result.stop_reasons == ["length"] * len(PROMPTS)


def _eos_cases(reference: list[int]):
    """EOS choices relative to a reference output without EOS."""
    return {
        "first_round": reference[0],  # the very first generated token
        "early": reference[2],
        "middle": reference[len(reference) // 2],
        "several": [reference[5], reference[3], 95],
    }


@pytest.mark.slow_except('perturbed-several-llama')
@pytest.mark.parametrize("family", PAPER_FAMILIES)
@pytest.mark.parametrize("case", ["first_round", "early", "middle", "several"])
@pytest.mark.parametrize("draft_kind", ["self", "perturbed"])
def test_eos_cut_matches_generate(pairs, greedy_reference, family, case, draft_kind):
    target, draft = pairs(family, draft_kind)
    prompts = PROMPTS[:4]
    # choose EOS ids from row 0's EOS-free output so that row 0 stops where we want;
    # the other rows stop wherever those ids happen to appear (or never)
    eos = _eos_cases(greedy_reference(target, prompts[0], NEW))[case]
    result = batchspec.generate(target, draft, prompts, num_draft_tokens=5, max_new_tokens=NEW,
                                eos_token_id=eos, check_invariants=True)
    expected = [greedy_reference(target, p, NEW, eos) for p in prompts]
    assert result.sequences == expected
    ids = eos if isinstance(eos, list) else [eos]
    assert result.sequences[0][-1] in ids  # row 0 really stopped at an EOS
    for seq, reason in zip(result.sequences, result.stop_reasons):
        # outputs are cut after the first EOS, so a row that saw one ends with it
        if any(t in ids for t in seq):
            assert reason == "eos" and seq[-1] in ids
        else:
            assert reason == "length" and len(seq) == NEW


def test_eos_in_middle_of_accepted_block(pairs, greedy_reference):
    """With the target as its own draft every round accepts k+1 tokens, so an EOS
    at generated index 2 lands inside the first round's accepted block."""
    target, draft = pairs("llama", "self")
    prompt = PROMPTS[1]
    ref = greedy_reference(target, prompt, NEW)
    eos = ref[2]
    assert eos not in ref[:2]
    result = batchspec.generate(target, draft, [prompt], num_draft_tokens=5, max_new_tokens=NEW,
                                eos_token_id=eos, check_invariants=True)
    assert result.sequences == [ref[:3]]
    assert result.stats.rounds == 1 and result.stats.per_round[0].accepted == [5]
    assert result.stats.per_round[0].appended == [3]


@pytest.mark.parametrize("family", ["mistral", "qwen2", "gpt2", "gpt_neox"])
def test_other_families(greedy_reference, family):
    from batchspec.models import tiny

    target, draft = tiny.pair(family, "perturbed")
    prompts = PROMPTS[:4]
    result = batchspec.generate(target, draft, prompts, num_draft_tokens=3, max_new_tokens=12,
                                check_invariants=True)
    assert result.sequences == [greedy_reference(target, p, 12) for p in prompts]


def test_semantic_cache_check_on_ragged_run(pairs, greedy_reference):
    """The semantic mode recomputes every cached key/value from scratch after
    every step; a mixed-acceptance run must pass it."""
    target, draft = pairs("qwen3", "perturbed")
    prompts = PROMPTS[:3]
    result = batchspec.generate(target, draft, prompts, num_draft_tokens=3, max_new_tokens=10,
                                check_invariants="semantic")
    assert result.sequences == [greedy_reference(target, p, 10) for p in prompts]
    assert result.stats.realignments > 0  # the batch really turned ragged


@pytest.mark.slow
def test_autoregressive_method_is_exact(pairs, greedy_reference):
    target, _ = pairs("glm4", "self")
    result = batchspec.generate(target, None, PROMPTS, method="autoregressive", max_new_tokens=NEW,
                                batch_size=3, check_invariants=True)
    assert result.sequences == [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert result.stats.draft_calls == 0
    assert result.stats.tokens_per_target_call == 1.0


def test_max_new_tokens_zero_and_one(pairs, greedy_reference):
    target, draft = pairs("llama", "perturbed")
    assert batchspec.generate(target, draft, PROMPTS[:2], max_new_tokens=0).sequences == [[], []]
    result = batchspec.generate(target, draft, PROMPTS[:2], max_new_tokens=1, check_invariants=True)
    assert result.sequences == [greedy_reference(target, p, 1) for p in PROMPTS[:2]]


def test_all_prompts_length_one(pairs, greedy_reference):
    """L = 1 at prefill: the caches start empty."""
    target, draft = pairs("llama", "perturbed")
    prompts = [[5], [17], [60]]
    result = batchspec.generate(target, draft, prompts, num_draft_tokens=3, max_new_tokens=12,
                                check_invariants=True)
    assert result.sequences == [greedy_reference(target, p, 12) for p in prompts]
