"""The spec's sampling blocks (Spec §4.3.2, §5.5): the theorem exactly, in
fractions, on every pair of small distributions, and the tensor code refines
the abstract rule on random cases."""

from __future__ import annotations

import itertools
import random
import types
from fractions import Fraction

import pytest
import torch

from _spec_helpers import spec_namespace

from batchspec.reference import sampling


@pytest.fixture(scope="module")
def spec():
    return spec_namespace()


def _distributions(vocab: int, parts: int):
    """Every distribution over ``vocab`` tokens in multiples of ``1/parts``."""
    for cut in itertools.product(range(parts + 1), repeat=vocab - 1):
        if sum(cut) <= parts:
            yield [Fraction(c, parts) for c in cut] + [Fraction(parts - sum(cut), parts)]


def test_5_5_every_pair_of_small_distributions(spec):
    pairs = list(itertools.product(_distributions(3, 4), repeat=2))
    assert len(pairs) == 225  # zeros in either, disjoint supports, p = q among them
    assert all(spec["samples_target"](p, q) for p, q in pairs)


def test_5_5_fails_for_a_wrong_residual(spec):
    """The statement can fail: with the residual replaced by p, most pairs break it."""
    namespace = dict(spec, residual=lambda p, q: list(p))
    for name in ("rule_distribution", "samples_target"):  # the spec's functions, rebound to the wrong residual
        namespace[name] = types.FunctionType(spec[name].__code__, namespace)
    broken = [p for p, q in itertools.product(_distributions(3, 4), repeat=2)
              if not namespace["samples_target"](p, q)]
    assert len(broken) > 100


def test_code_refines_the_spec_rule(spec):
    """The tensor rule decides what the abstract rule decides, position by
    position, with the same keyed uniforms (float64, random p and q with zeros)."""
    rng = random.Random(0)
    sampler = sampling.Sampler(keys={0: (4, 2)})
    for case in range(300):
        p = [rng.random() * (rng.random() > 0.3) for _ in range(5)]
        q = [rng.random() * (rng.random() > 0.3) for _ in range(5)]
        p[rng.randrange(5)] += 0.1
        q[rng.randrange(5)] += 0.1
        p, q = [x / sum(p) for x in p], [x / sum(q) for x in q]
        pt, qt = torch.tensor([p], dtype=torch.float64), torch.tensor([q], dtype=torch.float64)
        y = sampler.propose(qt, sampler.u([0], [case], "draft", qt))
        accepted, token = sampling.decide(sampler, pt, qt, y, [0], [case])
        assert (bool(accepted), int(token)) == spec["sample_position"](p, q, (4, 2), case), case
    assert spec["uniform"]((4, 2), 9, "accept") == sampling.uniform((4, 2), 9, "accept")


def test_sampled_acceptance_refines_the_spec(spec):
    """``acceptance.sampled`` on tensors decides each row's ``m_i`` and proposal
    as the spec's ``accept_sampled`` does on lists, bonus slot included, over
    random rounds of 3 rows with ``k'`` 1 to 4 (float64)."""
    from batchspec.reference import acceptance
    from batchspec.reference.transitions import Round

    g = torch.Generator().manual_seed(1)
    outcomes = set()
    for case in range(60):
        k = 1 + case % 4
        sampler = sampling.Sampler(sampling.Warping(temperature=0.9), {r: (case, r) for r in range(3)})
        start = torch.tensor([5, 9, 2]) + case
        draft_logits = [torch.randn(3, 6, generator=g, dtype=torch.float64) for _ in range(k + 1)]
        target_logits = torch.randn(3, k + 1, 6, generator=g, dtype=torch.float64) + 2 * torch.stack(draft_logits, 1)
        rnd = Round(k, torch.zeros(3, 0, dtype=torch.long), [], sampler, [0, 1, 2], start)
        for j in range(k):  # the drafts are the rule's proposals, as the draft step makes them
            rnd.drafts = torch.cat([rnd.drafts, rnd.propose(draft_logits[j])[:, None]], dim=1)
        rnd.draft_logits = draft_logits
        verdict = acceptance.sampled(rnd, target_logits)
        for i in range(3):
            ps = [sampler.p(target_logits[i:i + 1, j])[0].tolist() for j in range(k + 1)]
            qs = [sampler.q(draft_logits[j][i:i + 1])[0].tolist() for j in range(k + 1)]
            m, proposal = spec["accept_sampled"](rnd.drafts[i].tolist(), ps, qs, (case, i), int(start[i]))
            assert (int(verdict.accepted_drafts[i]), verdict.proposal[i, : m + 1].tolist()) == (m, proposal)
            outcomes.add("bonus" if m == k else "residual")
    assert outcomes == {"bonus", "residual"}
