"""The confidence-stopped draft policy (Spec §4.2.3) and the one resolver of
``num_draft_tokens`` (``generate`` and ``Scheduler`` alike): whatever the
policy decides while drafting, greedy output is the target's own and every
invariant stays silent; sampled output is the keyed one. About 20 s."""

from __future__ import annotations

import pytest
import torch

import batchspec
from batchspec.cli.bench import parse_ks
from batchspec.draft_lengths import calibrate, start
from batchspec.models.registry import load_pair
from batchspec.reference import Models
from batchspec.reference.draft_policy import Auto, Confident, Fixed, as_policy, keep_drafting
from batchspec.reference.transitions import Round
from batchspec.reference.state import attention_mask
from batchspec.scheduler import Scheduler
from batchspec.testing import random_prompts

NEW = 24


@pytest.fixture(scope="module")
def default_pair():
    """The embedded default pair in float64: a trained draft, sure of itself on code."""
    target, draft, tokenizer = load_pair("default", dtype=torch.float64)
    prompts = [tokenizer.encode(p) for p in ("def main(", "import os\nimport sys\n", "class Queue:\n    def ",
                                             "for i in range(10):\n    ", "x = [")]
    return target, draft, prompts


def test_keep_drafting_is_the_spec_table():
    confident = torch.tensor([True, True, False])
    after, more = keep_drafting(confident, torch.tensor([0.9, 0.1, 0.99]), 0.4)
    assert after.tolist() == [True, False, False] and more
    after, more = keep_drafting(after, torch.tensor([0.3, 0.9, 0.9]), 0.4)
    assert after.tolist() == [False, False, False] and not more  # a row once unsure stays unsure


def test_stopping_cuts_the_round_frame_to_the_drafts_made():
    pad = torch.tensor([0, 2])
    rnd = Round(6, torch.zeros((2, 0), dtype=torch.long))
    rnd.mask = attention_mask(pad, 5 + 6)
    rnd.positions = torch.arange(11).repeat(2, 1)
    rnd.stop_at(2)
    assert rnd.k == 2 and rnd.mask.shape == (2, 5 + 2) and rnd.positions.shape == (2, 7)
    assert torch.equal(rnd.mask, attention_mask(pad, 5 + 2))


@pytest.mark.slow_except('0.6-exspec')
@pytest.mark.parametrize("method", ["eqspec", "exspec"])
@pytest.mark.parametrize("threshold", [0.2, 0.6, 0.95])
def test_confident_drafting_is_exact_and_keeps_every_invariant(default_pair, method, threshold):
    target, draft, prompts = default_pair
    expected = batchspec.generate(target, None, prompts, method="autoregressive", max_new_tokens=NEW).sequences
    policy = Confident(threshold=threshold, k_max=10)
    result = batchspec.generate(target, draft, prompts, method=method, num_draft_tokens=policy,
                                max_new_tokens=NEW, batch_size=3, check_invariants=True)
    assert result.sequences == expected
    drafted = [r.drafted for r in result.stats.per_round]
    # not vacuous: the policy both stopped early and drafted more than one token in some rounds
    assert any(1 < k < 10 for k in drafted) or (min(drafted) < 10 and max(drafted) > 1), drafted


@pytest.mark.slow
def test_a_higher_threshold_drafts_less(default_pair):
    target, draft, prompts = default_pair
    drafted = {}
    for threshold in (0.1, 0.9):
        result = batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=Confident(threshold, 12),
                                    max_new_tokens=NEW, batch_size=1)
        drafted[threshold] = result.stats.drafted_tokens
    assert drafted[0.9] < drafted[0.1]


def test_confident_on_a_tiny_pair_is_exact_at_every_threshold(pairs, greedy_reference):
    target, draft = pairs("qwen3", "perturbed")
    prompts = random_prompts(seed=5, count=4, low=2, high=12)
    for threshold in (1e-9, 0.02, 1.0):  # never stops; stops on a random model's flat softmax; stops at once
        result = batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=Confident(threshold, 5),
                                    max_new_tokens=10, check_invariants=True)
        assert result.sequences == [greedy_reference(target, p, 10) for p in prompts]


def remaining_before_each_round(per_round, budget):
    """Per round, the remaining budgets ``r_i`` of its rows before it (Spec §4.2)."""
    generated, remaining = {}, []
    for record in per_round:
        remaining.append([budget - generated.get(r, 0) for r in record.requests])
        for r, a in zip(record.requests, record.appended):
            generated[r] = generated.get(r, 0) + a
    return remaining


@pytest.mark.parametrize("batch_size", [1, 3])
def test_adaptive_policies_spare_the_draft_only_the_target_could_replace(pairs, greedy_reference, batch_size):
    """Spec §4.2: ``confident`` (and ``auto``) draft ``min(k, min r_i, max r_i - 1)``, a fixed
    ``k`` the paper's ``min(k, min r_i)``; both exact. The perturbed draft is never unsure at a
    threshold of 1e-9, so every round drafts its cap and the rule is read off every round."""
    target, draft = pairs("qwen3", "perturbed")
    prompts = random_prompts(seed=9, count=3, low=2, high=9)
    expected = [greedy_reference(target, p, 7) for p in prompts]
    spared = 0
    for policy, rule in ((Confident(1e-9, 16), lambda r: min(16, min(r), max(r) - 1)),
                         (Fixed(16), lambda r: min(16, min(r)))):
        result = batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=policy,
                                    max_new_tokens=7, batch_size=batch_size, check_invariants=True)
        assert result.sequences == expected
        remaining = remaining_before_each_round(result.stats.per_round, 7)
        assert [r.drafted for r in result.stats.per_round] == [rule(r) for r in remaining]
        spared += sum(min(r) == max(r) for r in remaining) if isinstance(policy, Confident) else 0
    assert spared >= 1  # not vacuous: some round had every row on the same budget, so the caps differed


@pytest.mark.slow
def test_sampled_output_is_the_keyed_output_whatever_the_policy(default_pair):
    target, draft, prompts = default_pair
    runs = [batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=k, max_new_tokens=16,
                               do_sample=True, temperature=0.8, seed=3, check_invariants=True).sequences
            for k in (4, "confident", Confident(0.7, 6))]
    assert runs[1] == runs[0] and runs[2] == runs[0]


@pytest.mark.slow
@pytest.mark.parametrize("k", ["auto", "confident"])
def test_the_scheduler_resolves_policies_as_generate_does(default_pair, k):
    target, draft, prompts = default_pair
    expected = batchspec.generate(target, None, prompts, method="autoregressive", max_new_tokens=NEW).sequences
    scheduler = Scheduler(target, draft, num_draft_tokens=k, max_new_tokens=NEW, batch_size=2,
                          check_invariants=True)
    ids = [scheduler.submit(p) for p in prompts]
    done = scheduler.run()
    assert [done[i].tokens for i in ids] == expected
    assert isinstance(scheduler.k, Auto if k == "auto" else Confident)


@pytest.mark.parametrize("long_from", [None, 0.0])
def test_auto_calibrates_with_a_few_calls_of_the_shapes_it_prices(default_pair, monkeypatch, long_from):
    """The default pair's calls are short: each shape runs once untimed first and the timed fill
    twice; with every call counted long (``LONG_CALL`` 0) the first runs count and nothing runs
    untimed. The contexts are one row's fill copied to the batch; the timed fill feeds every row."""
    from batchspec import draft_lengths

    if long_from is not None:
        monkeypatch.setattr(draft_lengths, "LONG_CALL", long_from)
    target, draft, _ = default_pair
    fed = {"target": [], "draft": []}  # [rows, tokens] of every call
    hooks = [m.register_forward_hook(lambda _m, _a, kwargs, _o, name=n: fed[name].append(
        tuple(kwargs["input_ids"].shape)), with_kwargs=True) for n, m in (("target", target), ("draft", draft))]
    try:
        costs = calibrate(target, draft, batch_size=4)
    finally:
        for h in hooks:
            h.remove()
    assert sorted(costs.target[4]) == [1, 2, 9] and set(costs.draft) == set(costs.draft_prefill) == {4}
    assert costs.draft_prefill[4] > 0
    short = long_from is None
    # one row's context fill; then per shape 2 counted calls, one more untimed when short
    assert fed["target"] == [(1, 64)] + [(4, n) for n in (1, 2, 9) for _ in range(2 + short)]
    # the draft's own: its context, its call shape, then the timed fill of every row (twice when short)
    assert fed["draft"] == [(1, 64)] + [(4, 1)] * (2 + short) + [(4, 64)] * (1 + short)
    assert isinstance(start(Models(target, draft), as_policy("auto"), 4), Auto)
    assert start(Models(target, None), as_policy("confident"), 4) == Fixed(0)


@pytest.mark.parametrize("bad, message", [
    ("sure", "num_draft_tokens must be an int >= 1 or one of ('auto', 'confident'), got 'sure'"),
    (Confident(threshold=0.0), "Confident.threshold must be in (0, 1], got 0.0"),
    (Confident(k_max=0), "Confident.k_max"),
])
def test_bad_policies_are_refused_by_name(default_pair, bad, message):
    target, draft, prompts = default_pair
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=bad)


def test_the_cli_takes_policy_names():
    assert parse_ks("1,confident,auto") == [Fixed(1), Confident(), Auto()]
