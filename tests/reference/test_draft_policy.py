"""``num_draft_tokens="auto"`` (Spec §4.2.2): the choice of ``k'`` follows the
costs it is given, and whatever it chooses — plain decoding included — the
greedy output is the target's own. About 10 s."""

from __future__ import annotations

import pytest
import torch

import batchspec
from batchspec.driver import drive
from batchspec.methods import METHODS, DecodeConfig
from batchspec.reference import Models
from batchspec.reference.draft_costs import Costs, best_k, expected_tokens, rounds_to_finish, worth_trying
from batchspec.reference.draft_policy import Auto, DraftPolicy
from batchspec.stats import Stats
from batchspec.testing import random_prompts

PROMPTS = random_prompts(seed=11, count=6, low=2, high=20)
NEW = 14


def flat_costs(draft: float, target_base: float, target_per_token: float) -> Costs:
    return Costs(draft={1: draft, 8: draft},
                 target={b: {n: target_base + target_per_token * n for n in (1, 2, 5, 9)} for b in (1, 8)})


def test_free_drafts_and_flat_verify_draft_the_most():
    assert best_k(flat_costs(0.0, 1.0, 0.0), batch=4, alpha=0.9) == 8


def test_drafts_that_cost_more_than_they_save_mean_plain_decoding():
    # a verify token costs as much as a whole call: drafting can never pay against plain decoding,
    # which the run then does without the draft (worth_trying) ...
    assert not worth_trying(flat_costs(0.5, 0.0, 1.0), 4, 32, alpha=1.0)
    # ... while inside a run that keeps the draft a k = 0 round pays its catch-up (Spec §4.2.1), and one
    # draft, whose catch-up is deferred, costs less per token: 2.5 s / 1.9 tokens against 1.5 s / 1 token
    assert best_k(flat_costs(0.5, 0.0, 1.0), batch=4, alpha=0.9) == 1
    # hopeless drafts with a non-trivial draft cost: plain decoding as well
    assert best_k(flat_costs(0.2, 1.0, 0.0), batch=4, alpha=0.0) == 0


def test_acceptance_moves_the_choice():
    costs = flat_costs(0.05, 1.0, 0.1)
    assert best_k(costs, 4, alpha=0.2) < best_k(costs, 4, alpha=0.9)
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_acceptance_estimate_counts_tried_drafts():
    policy = Auto(costs=flat_costs(0.0, 1.0, 0.0), prior_weight=0.0)
    policy.learn(4, [4, 0, 2])  # tried 4, 1 and 3 drafts
    assert policy.alpha == pytest.approx(6 / 8)
    policy.learn(0, [0, 0, 0])  # a round without drafts teaches nothing
    assert policy.alpha == pytest.approx(6 / 8)


class Scripted(DraftPolicy):
    """A policy that plays a fixed sequence of k (cycling), 0 included."""

    def __init__(self, ks):
        self.ks, self.seen, self.k_max = ks, [], max(ks)

    def choose(self, batch):
        return self.ks[len(self.seen) % len(self.ks)]

    def learn(self, drafted, accepted):
        self.seen.append(drafted)


@pytest.mark.parametrize("method", ["eqspec", "exspec"])
def test_any_sequence_of_k_is_exact_and_keeps_every_invariant(pairs, greedy_reference, method):
    target, draft = pairs("llama", "perturbed")
    policy = Scripted([0, 3, 0, 0, 1, 5, 2])
    config = DecodeConfig(k=policy, max_new_tokens=NEW, eos=None, batch_size=3)
    outputs, stats = {}, Stats(method)
    with torch.no_grad():
        for decoder in METHODS[method].decoders(Models(target, draft), PROMPTS, config):
            outputs.update(drive(decoder, stats, True, None, [], target.device))
    assert [outputs[r].tokens for r in range(len(PROMPTS))] == [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert 0 in policy.seen and max(policy.seen) >= 3  # plain-decoding rounds really ran, and drafting resumed


@pytest.mark.parametrize("method", ["eqspec", "exspec"])
def test_auto_is_exact(pairs, greedy_reference, method):
    target, draft = pairs("qwen3", "perturbed")
    result = batchspec.generate(target, draft, PROMPTS, method=method, num_draft_tokens="auto",
                                max_new_tokens=NEW, batch_size=3, check_invariants=True)
    assert result.sequences == [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert all(0 <= r.drafted <= 8 for r in result.stats.per_round)


def test_auto_is_refused_where_no_policy_applies(pairs):
    target, draft = pairs("llama", "perturbed")
    with pytest.raises(ValueError, match="num_draft_tokens='auto' is supported by"):
        batchspec.generate(target, draft, PROMPTS, method="masking", num_draft_tokens="auto")
    with pytest.raises(ValueError, match="num_draft_tokens must be an int"):
        batchspec.generate(target, draft, PROMPTS, num_draft_tokens="fast")


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.95])
@pytest.mark.parametrize("costs", [(0.05, 1.0, 0.1), (0.5, 0.0, 1.0), (0.0, 1.0, 0.0), (0.1, 0.2, 0.3)])
def test_the_code_chooses_as_the_spec_does(alpha, costs):
    from tests._spec_helpers import spec_namespace

    table = flat_costs(*costs)
    spec_k = spec_namespace()["best_k"](table.draft_call(4), {n: table.target_call(4, n) for n in range(1, 10)},
                                        alpha)
    assert best_k(table, 4, alpha) == spec_k


@pytest.mark.parametrize("method", ["eqspec", "exspec"])
def test_sampled_rounds_of_any_k_equal_the_per_position_reference(pairs, method):
    """Under sampling a round with k' = 0 still decides its one slot by the rule
    (the catch-up gives the draft's q before verifying, Spec §4.3.2), so the
    output cannot depend on the policy's choices."""
    from batchspec.reference.sampling import Sampler, Warping
    from batchspec.testing import reference_sampled

    target, draft = pairs("llama", "perturbed")
    prompts = PROMPTS[:4]
    keys = {r: (3, r) for r in range(len(prompts))}
    policy = Scripted([0, 3, 0, 0, 1, 5, 2])
    config = DecodeConfig(k=policy, max_new_tokens=NEW, eos=None, batch_size=3,
                          sampler=Sampler(Warping(0.9, None, None), keys))
    outputs, stats = {}, Stats(method)
    with torch.no_grad():
        for decoder in METHODS[method].decoders(Models(target, draft), prompts, config):
            outputs.update(drive(decoder, stats, True, None, [], target.device))
    expected = [reference_sampled(target, draft, p, NEW, keys[r], None, 0.9, None, None)
                for r, p in enumerate(prompts)]
    assert [outputs[r].tokens for r in range(len(prompts))] == expected
    assert 0 in policy.seen


def test_plain_decoding_is_not_absorbing_the_probe_moves_the_estimate():
    """At ``k = 0`` no draft is tried, so without the catch-up's probe the
    estimate would freeze and ``auto`` would choose 0 for ever at that batch
    size; the probe's first-slot tries move it, and drafting resumes."""
    costs = flat_costs(0.2, 1.0, 1.0)  # a verify token costs as much as the call: drafting needs a high alpha
    assert best_k(costs, 4, alpha=0.0) == 0 and best_k(costs, 4, alpha=0.9) > 0
    policy = Auto(costs=costs)
    policy.learn(4, [0, 0, 0, 0] * 3)  # every first draft rejected: alpha 2 / 16
    assert policy.choose(4) == 0
    for _ in range(5):
        policy.learn(0, [0, 0, 0, 0])  # a round without drafts: nothing tried
    assert policy.choose(4) == 0  # frozen, as it was before the probe existed
    for _ in range(10):
        policy.probe([1, 1, 1, 1])  # the draft's choice matched the target's in every row
    assert policy.alpha == pytest.approx((0 + 2 + 40) / (12 + 4 + 40))
    assert policy.choose(4) > 0


class Probing(Scripted):
    """A scripted policy that also takes the probe of its k' = 0 rounds."""

    def __init__(self, ks):
        super().__init__(ks)
        self.probes = []

    def probe(self, matches):
        self.probes.append((self.seen[-1], list(matches)))


@pytest.mark.slow_except('exspec-sampled')
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("method", ["eqspec", "exspec"])
def test_rounds_without_drafts_probe_acceptance_from_the_catch_up(pairs, method, sampled):
    """A draft that is the target agrees at every probe (under sampling q = p,
    so the rule accepts every draw); an unrelated one does not; only k' = 0
    rounds probe, one entry per row of the round."""
    from batchspec.reference.sampling import Sampler, Warping

    seen = {}
    for kind in ("self", "unrelated"):
        target, draft = pairs("llama", kind)
        policy = Probing([0, 2])
        sampler = Sampler(Warping(1.0, None, None), {r: (7, r) for r in range(len(PROMPTS))}) if sampled else None
        config = DecodeConfig(k=policy, max_new_tokens=NEW, eos=None, batch_size=3, sampler=sampler)
        stats = Stats(method)
        with torch.no_grad():
            for decoder in METHODS[method].decoders(Models(target, draft), PROMPTS, config):
                drive(decoder, stats, True, None, [], target.device)
        zero = [r for r in stats.per_round if r.drafted == 0]
        assert zero and all(r.probed is not None and len(r.probed) == len(r.requests) for r in zero)
        assert all(r.probed is None for r in stats.per_round if r.drafted)
        assert [m for _, m in policy.probes] == [r.probed for r in zero] and {d for d, _ in policy.probes} == {0}
        seen[kind] = [m for r in zero for m in r.probed]
    assert set(seen["self"]) == {1}
    assert 0 in seen["unrelated"]


def test_speculation_that_cannot_pay_even_at_full_acceptance_is_told_apart():
    assert not worth_trying(flat_costs(0.5, 0.0, 1.0), 4, 32, alpha=1.0)  # a verify token costs a whole call
    assert worth_trying(flat_costs(0.0, 1.0, 0.0), 4, 32, alpha=0.5)  # free drafts, flat verify: every k pays
    assert worth_trying(flat_costs(0.05, 1.0, 0.1), 4, 32, alpha=0.5)
    assert not worth_trying(flat_costs(0.05, 1.0, 0.1), 4, 32, alpha=0.0)  # drafts never accepted


def test_rounds_to_finish_are_exact_at_the_extremes_and_count_the_slowest_row():
    assert rounds_to_finish(1.0, 3, 10, rows=4) == pytest.approx(3.0)  # 4 + 4 + 2 tokens
    assert rounds_to_finish(0.0, 3, 10, rows=4) == pytest.approx(10.0)  # one token a round
    assert rounds_to_finish(0.5, 1, 1, rows=8) == pytest.approx(1.0)  # one token left: one round
    # a row's mean rounds, then the slowest of 2, 8 and 64 rows: more rounds the more rows wait
    rounds = [rounds_to_finish(0.5, 2, 16, rows) for rows in (1, 2, 8, 64)]
    assert rounds == sorted(rounds) and rounds[0] < rounds[-1] < 16


def test_rounds_to_finish_match_simulated_batches():
    """The expected rounds of the slowest row against a seeded simulation of
    the same model (each draft accepted with probability alpha given the ones
    before it, k' capped by what the row has left)."""
    generator = torch.Generator().manual_seed(5)
    for alpha, k, budget, rows in [(0.5, 1, 16, 8), (0.8, 4, 24, 4), (0.3, 2, 9, 1)]:
        runs = []
        for _ in range(4000):
            slowest = 0
            for _ in range(rows):
                left, r = budget, 0
                while left:
                    cap, m = min(k, left), 0
                    while m < cap and torch.rand((), generator=generator) < alpha:
                        m += 1
                    left, r = left - min(m + 1, left), r + 1
                slowest = max(slowest, r)
            runs.append(slowest)
        assert rounds_to_finish(alpha, k, budget, rows) == pytest.approx(sum(runs) / len(runs), rel=0.02)


def test_whether_to_draft_counts_the_slowest_row_and_the_draft_prefill():
    """One cost table, drafting 10 % cheaper per token than plain decoding
    for one row: worth trying at batch 1; not for a batch of 8 whose rows
    all wait for the slowest, over 16 tokens; nor once the draft's prefill
    of long prompts is paid (Spec §4.2.2)."""
    costs = Costs(draft={1: 0.2, 8: 0.2}, target={1: {1: 1.0, 2: 1.15, 9: 2.0}, 8: {1: 1.0, 2: 1.15, 9: 2.0}},
                  draft_prefill={1: 0.01, 8: 0.01})
    assert best_k(costs, 1, 0.5) == 1 and 1.5 / (0.2 + 1.15) > 1.0  # the rate model: k = 1 beats plain
    assert worth_trying(costs, 1, 16, alpha=0.5)
    assert not worth_trying(costs, 8, 16, alpha=0.5)  # the slowest of 8 rows takes about 15 % more rounds
    assert worth_trying(costs, 8, None, alpha=0.5)  # a scheduler's rows are replaced: one row priced
    assert not worth_trying(costs, 1, 16, alpha=0.5, width=200)  # a prefill of 2 s against a 16 s run
    assert worth_trying(costs, 1, 16, alpha=0.5, width=20)


@pytest.mark.parametrize("budget, batch, width", [(16, 1, 0), (16, 8, 0), (40, 4, 30), (5, 2, 100), (None, 8, 50)])
@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9])
def test_the_code_decides_whether_to_draft_as_the_spec_does(budget, batch, width, alpha):
    from tests._spec_helpers import spec_namespace

    for costs in (flat_costs(0.2, 1.0, 0.15), flat_costs(0.05, 1.0, 0.1), flat_costs(0.5, 0.0, 1.0)):
        costs = Costs(draft=costs.draft, target=costs.target, draft_prefill={1: 0.01, 8: 0.02})
        spec = spec_namespace()["worth_trying"](
            costs.draft_call(batch), {n: costs.target_call(batch, n) for n in range(1, 10)},
            costs.draft_prefill_call(batch, width), batch, budget, alpha)
        assert worth_trying(costs, batch, budget, alpha, width=width) == spec


def test_one_auto_calibrates_once_per_shape_and_says_what_it_measured(pairs, greedy_reference):
    """The memo lives in the ``Auto`` object the caller passes: a second call at
    the same batch size measures nothing; another batch size measures again."""
    target, draft = pairs("llama", "perturbed")
    auto = Auto()
    runs = [batchspec.generate(target, draft, PROMPTS[:4], num_draft_tokens=auto, max_new_tokens=6, batch_size=b)
            for b in (2, 2, 4)]
    assert [len(r.stats.calibrations) for r in runs] == [1, 0, 1]
    assert runs[0].stats.calibrations[0]["batch_size"] == 2 and runs[0].stats.calibrations[0]["seconds"] > 0
    assert sorted(key[2] for key in auto.calibrations) == [2, 4] and auto.costs is None  # the caller's object
    assert all(r.sequences == [greedy_reference(target, p, 6) for p in PROMPTS[:4]] for r in runs)
    assert runs[1].stats.draft_policy["policy"] == "auto" and "costs" in runs[1].stats.draft_policy


def test_auto_by_name_calibrates_once_per_shape_on_the_target(pairs, greedy_reference):
    """The name ``"auto"`` builds a policy per call, but its memo is the target
    model's ``batchspec_calibrations``: a second call at the same batch size
    measures nothing, another batch size or another target measures again,
    and deleting the attribute measures again (Spec §4.2.2)."""
    target, draft = pairs("llama", "perturbed")
    other, _ = pairs("llama", "self")
    for model in (target, other):
        model.__dict__.pop("batchspec_calibrations", None)  # the pairs fixture shares models between tests

    def calibrations(model, b):
        result = batchspec.generate(model, draft, PROMPTS[:4], num_draft_tokens="auto", max_new_tokens=6,
                                    batch_size=b)
        assert result.sequences == [greedy_reference(model, p, 6) for p in PROMPTS[:4]]
        return len(result.stats.calibrations)

    assert [calibrations(target, b) for b in (2, 2, 4, 4)] == [1, 0, 1, 0]
    assert sorted(key[2] for key in target.batchspec_calibrations) == [2, 4]
    assert calibrations(other, 2) == 1  # another target: its own memo
    del target.batchspec_calibrations
    assert calibrations(target, 2) == 1


def test_auto_drafts_for_one_row_and_not_where_the_batch_waits_for_its_slowest(pairs, greedy_reference):
    """The same measured costs: a batch of one drafts; a batch of 6 decodes
    without the draft (no draft call at all, not even its prefill), and its
    statistics say why; both outputs are the target's own."""
    target, draft = pairs("llama", "perturbed")
    costs = Costs(draft={1: 0.2, 8: 0.2}, target={1: {1: 1.0, 2: 1.15, 9: 2.0}, 8: {1: 1.0, 2: 1.15, 9: 2.0}})
    runs = {b: batchspec.generate(target, draft, PROMPTS, num_draft_tokens=Auto(costs=costs), max_new_tokens=16,
                                  batch_size=b) for b in (1, 6)}
    for run in runs.values():
        assert run.sequences == [greedy_reference(target, p, 16) for p in PROMPTS]
    assert runs[1].stats.draft_calls > 0 and runs[1].stats.draft_policy["k_max"] == 8
    assert runs[6].stats.draft_calls == 0 and runs[6].stats.draft_policy["k_max"] == 0
    assert "slowest row" in runs[6].stats.draft_policy["note"] and "16 tokens" in runs[6].stats.draft_policy["note"]


def test_auto_decodes_without_the_draft_where_drafting_cannot_pay(pairs, greedy_reference):
    target, draft = pairs("llama", "perturbed")
    result = batchspec.generate(target, draft, PROMPTS, num_draft_tokens=Auto(costs=flat_costs(0.5, 0.0, 1.0)),
                                max_new_tokens=NEW, batch_size=3, check_invariants=True)
    assert result.sequences == [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert result.stats.draft_calls == 0 and {r.drafted for r in result.stats.per_round} == {0}
    assert "decoded without the draft" in result.stats.draft_policy["note"]
    paying = batchspec.generate(target, draft, PROMPTS, num_draft_tokens=Auto(costs=flat_costs(0.0, 1.0, 0.0)),
                                max_new_tokens=NEW, batch_size=3)
    assert paying.stats.draft_calls > 0 and "note" not in paying.stats.draft_policy
