"""I8 sampled verification (Spec §3.8) fires on decoders and observations that
commit anything but the rule's decision, and is silent on correct sampled runs."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

import batchspec
from batchspec.reference.draft_policy import Fixed
from batchspec.distribution import controls
from batchspec.invariants import INVARIANTS, violations
from batchspec.invariants.sampled_verification import sampled_verification
from batchspec.invariants.verification import greedy_verification
from batchspec.reference import Models, acceptance, decode, observation
from batchspec.reference.eqspec import STEPS
from batchspec.reference.sampling import Sampler, Warping
from batchspec.reference.transitions import draft_one
from batchspec.testing import random_prompts

PROMPTS = random_prompts(seed=5, count=4, low=2, high=12)
SAMPLER = Sampler(Warping(temperature=0.8), {r: (3, r) for r in range(len(PROMPTS))})


def _observations(target, draft, steps, k=3, new=10):
    decoder = decode(Models(target, draft), PROMPTS, list(range(len(PROMPTS))), Fixed(k), new, None,
                     replace(steps, sampler=steps.sampler or SAMPLER))
    return [observation(e) for e in decoder if e.state.batch]


def _i6(obs_list):
    return [v for o in obs_list for v in sampled_verification(o)]


@pytest.fixture(scope="module")
def sampled_run(pairs):
    target, draft = pairs("llama", "perturbed")
    return _observations(target, draft, STEPS)


def test_registered_last_with_its_predicate():
    ids = [i for i, _ in INVARIANTS]
    assert ids == ["I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8"]
    assert dict(INVARIANTS)["I8"].__name__ == "sampled_verification"


def test_silent_on_a_valid_sampled_run(sampled_run):
    verify = [o for o in sampled_run if o.step == "verify"]
    assert verify and all(o.sampled is not None for o in verify)
    assert any(len(set(map(len, o.committed))) > 1 for o in verify)  # ragged acceptance really happened
    assert [v for o in sampled_run for v in violations(o)] == []
    assert all(greedy_verification(o) == [] for o in verify)  # I5 leaves sampled rounds to I8


def test_silent_under_exspec_and_autoregressive(pairs):
    target, draft = pairs("qwen3", "unrelated")
    for method in ("exspec", "autoregressive"):
        result = batchspec.generate(target, draft, PROMPTS, method=method, num_draft_tokens=2, max_new_tokens=8,
                                    batch_size=2, do_sample=True, seed=1, check_invariants="record")
        assert result.violations == []


def test_fires_on_a_tampered_token(sampled_run):
    obs = copy.deepcopy(next(o for o in sampled_run if o.step == "verify" and len(o.committed[1]) >= 2))
    real = obs.committed[1][-1]
    obs.committed[1][-1] = (real + 1) % 96
    found = sampled_verification(obs)
    assert [(v.invariant, v.row, v.expected, v.actual) for v in found] == [("I8", 1, real, (real + 1) % 96)]
    assert "not the rule's decision" in found[0].detail


def test_fires_without_recorded_logits(sampled_run):
    obs = copy.deepcopy(next(o for o in sampled_run if o.step == "verify"))
    obs.calls[-1].logits = None
    assert [v.detail for v in sampled_verification(obs)] == ["tokens committed without a recorded verification call"]


def test_fires_on_the_bonus_from_the_draft(pairs):
    target, draft = pairs("llama", "perturbed")
    _, steps = controls()["bonus from the draft"]
    found = _i6(_observations(target, draft, steps, k=2, new=16))
    assert found and all("rule's decision" in v.detail for v in found)


def _greedy_draft_one(models, state, rnd, calls):
    """A draft step that proposes the argmax under sampling (transformers #30778)."""
    sampler, rnd.sampler = rnd.sampler, None  # the greedy proposal, on the same call
    try:
        draft_one(models, state, rnd, calls)
    finally:
        rnd.sampler = sampler


def test_fires_on_a_greedy_draft(pairs):
    target, draft = pairs("glm4", "unrelated")
    found = _i6(_observations(target, draft, replace(STEPS, draft_one=_greedy_draft_one)))
    assert found and any(v.model == "draft" and "proposal" in v.detail for v in found)


def test_fires_on_uniforms_keyed_at_the_wrong_position(pairs):
    target, draft = pairs("llama", "unrelated")

    def shifted(rnd, logits):  # decides slot j with the uniforms of position t + 1
        return acceptance.sampled(replace(rnd, start=rnd.start + 1), logits)

    found = _i6(_observations(target, draft, replace(STEPS, accept_sampled=shifted)))
    assert found and all(v.invariant == "I8" for v in found)
