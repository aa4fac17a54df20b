"""Batch invariance of sampled output (Spec §5.5.1): the same (prompt, seed)
gives the same tokens at every batch size, k, method and window size, and
whatever other prompts share the batch. The stream shared by the batch (a
negative control) must break it."""

from __future__ import annotations

import pytest
from dataclasses import replace

import batchspec
from batchspec.reference.draft_policy import Fixed
from batchspec.distribution import controls, sample_continuations, tiny_vocab_pair
from batchspec.reference import Models, decode
from batchspec.reference.eqspec import STEPS
from batchspec.reference.sampling import Sampler, Warping
from batchspec.testing import random_prompts

PROMPTS = random_prompts(seed=23, count=6)
NEW = 10


def _sample(target, draft, prompts, seeds, **kw):
    return batchspec.generate(target, draft, prompts, max_new_tokens=NEW, do_sample=True, temperature=0.9,
                              top_p=0.95, seed=seeds, **kw).sequences


@pytest.mark.slow
def test_same_prompt_and_seed_same_tokens_everywhere(pairs):
    target, draft = pairs("qwen3", "unrelated")
    seeds = [40 + r for r in range(len(PROMPTS))]
    alone = [_sample(target, draft, [p], [s])[0] for p, s in zip(PROMPTS, seeds)]
    runs = {("eqspec", b, k, None) for b in (1, 2, 6) for k in (1, 4)}
    runs |= {("exspec", b, k, w) for b, k, w in ((2, 2, 2), (2, 3, 6), (3, 5, None))}
    for method, batch_size, k, window in sorted(runs, key=str):
        extra = {"window_size": window} if method == "exspec" else {}
        got = _sample(target, draft, PROMPTS, seeds, method=method, batch_size=batch_size,
                      num_draft_tokens=k, **extra)
        assert got == alone, (method, batch_size, k, window)
    # other company in the batch changes nothing: reversed order, duplicated prompts
    assert _sample(target, draft, PROMPTS[::-1], seeds[::-1])[::-1] == alone
    assert _sample(target, draft, PROMPTS[:2] * 2, seeds[:2] * 2) == alone[:2] * 2


def test_int_seed_keys_each_request():
    """``seed=s`` gives request ``r`` the key ``(s, r)``, so identical prompts get
    different samples; ``seed=[s]`` gives request 0 the key ``(s, 0)``, so it
    reproduces request 0 of the int-seeded run."""
    target, draft = tiny_vocab_pair(vocab=8)
    out = _sample(target, draft, [[2, 3]] * 4, 7, num_draft_tokens=2)
    assert len({tuple(o) for o in out}) > 1
    assert _sample(target, draft, [[2, 3]], [7])[0] == out[0]


def test_shared_stream_control_breaks_batch_invariance():
    """The control draws the right distribution (test_sampling_distribution)
    but a row's tokens depend on its batch: here, on how many copies share it."""
    target, draft = tiny_vocab_pair()
    warping = Warping(temperature=0.7, top_k=3)
    name = "stream shared by the batch"
    small = sample_continuations(target, draft, [2, 3, 1], 3, 4, warping, control=name)
    large = sample_continuations(target, draft, [2, 3, 1], 3, 16, warping, control=name)
    assert small != large[:4]
    right_small = sample_continuations(target, draft, [2, 3, 1], 3, 4, warping)
    right_large = sample_continuations(target, draft, [2, 3, 1], 3, 16, warping)
    assert right_small == right_large[:4]


def test_keys_not_positions_in_the_batch(pairs):
    """A decoder keyed by batch row instead of request breaks invariance too: the
    invariance test can fail for a plausible bug, not only for a shared stream."""
    target, draft = pairs("llama", "perturbed")
    sampler = Sampler(Warping(temperature=0.9), {r: (1, r) for r in range(4)})
    by_row = replace(sampler, uniforms=lambda keys, pos, purpose, like: sampler.uniforms(
        [(1, i) for i in range(len(keys))], pos, purpose, like))
    outs = []
    for batch in ([0, 1, 2, 3], [2, 3]):
        prompts = [PROMPTS[r] for r in batch]
        decoder = decode(Models(target, draft), prompts, batch, Fixed(3), NEW, None, replace(STEPS, sampler=by_row))
        try:
            while True:
                next(decoder)
        except StopIteration as stop:
            outs.append(stop.value)
    assert outs[0][2].tokens != outs[1][2].tokens or outs[0][3].tokens != outs[1][3].tokens
