"""EQSPEC's prefill feeds nothing (Spec §4.1): every call feeds the slots its
cache lacks, so the first draft call and the first verification feed the
prompt themselves. Exact, one target call per token at batch 1 (as
``generate``), every layout invariant silent, also under ``watch``'s layout
level; I4 fires when such a call feeds a committed slot wrongly. The filling
prefill that EXSPEC keeps (``fill=True``) is exact and silent too."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import torch

from _broken_helpers import K, N, WITH_PAD_ID, pair, reference

from batchspec.reference.draft_policy import Fixed
from batchspec.driver import drive
from batchspec.invariants import InvariantViolation, watch
from batchspec.reference import Models
from batchspec.reference.eqspec import STEPS, decode
from batchspec.reference.state import attention_mask
from batchspec.reference.transitions import draft_one, prefill
from batchspec.reference.storage import cache_length
from batchspec.stats import Stats
from batchspec.testing import random_prompts

PROMPTS = random_prompts(seed=3, count=4, low=2, high=12)
NEW = 8
FILLED = replace(STEPS, prefill=partial(prefill, fill=True))  # EXSPEC's prefill (Spec §8.4)


def run(models, steps, k, batch):
    calls = []
    hook = models.target.register_forward_hook(lambda *_: calls.append(1))
    outputs = {}
    try:
        with torch.no_grad():
            for first in range(0, len(PROMPTS), batch):
                requests = list(range(first, min(first + batch, len(PROMPTS))))
                decoder = decode(models, [PROMPTS[r] for r in requests], requests, Fixed(k), NEW, None, steps)
                outputs.update(drive(decoder, Stats("eqspec"), True, None, [], models.target.device))
    finally:
        hook.remove()
    return [outputs[r].tokens for r in range(len(PROMPTS))], len(calls)


@pytest.mark.parametrize("draft", [True, False])
def test_the_default_prefill_is_exact_silent_and_makes_no_extra_call(pairs, greedy_reference, draft):
    target, drafter = pairs("qwen3", "perturbed")
    models = Models(target, drafter if draft else None)
    k = 3 if draft else 0
    lazy, lazy_calls = run(models, STEPS, k, batch=1)
    filled, filled_calls = run(models, FILLED, k, batch=1)
    assert lazy == filled == [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert lazy_calls == filled_calls - len(PROMPTS)  # one prefill call fewer per request
    if not draft:
        assert lazy_calls == len(PROMPTS) * NEW  # as generate: the first token from the prompt's logits
    assert run(models, STEPS, k, batch=3)[0] == lazy  # ragged batches too
    assert run(models, FILLED, k, batch=3)[0] == lazy


def corrupt_first(models, state, rnd, calls):
    """Feed the prompt with its second-newest token changed (the grid itself untouched)."""
    if cache_length(state.draft_cache) == 0:  # the call that feeds the prompt
        tokens = state.tokens.clone()
        tokens[:, -2] = (tokens[:, -2] + 1) % 50 + 2
        return draft_one(models, replace(state, tokens=tokens), rnd, calls)
    return draft_one(models, state, rnd, calls)


def test_i4_fires_on_a_first_call_that_feeds_a_wrong_prompt_token(pairs):
    target, drafter = pairs("qwen3", "perturbed")
    steps = replace(STEPS, draft_one=corrupt_first)
    with pytest.raises(InvariantViolation, match="does not feed the committed slots after them"):
        run(Models(target, drafter), steps, 2, batch=2)


def watched(steps):
    """EQSPEC under ``watch``, its grid described by ``boundary()`` after the prefill and each realignment."""
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft, check="record") as w:
        decoder, steps_seen = decode(Models(target, draft), WITH_PAD_ID, list(range(len(WITH_PAD_ID))), Fixed(K), N,
                                     None, steps), 0
        try:
            while True:
                event = next(decoder)
                steps_seen += event.step != "finish"
                if event.step in ("prefill", "realign"):
                    s = event.state
                    w.boundary(s.tokens, attention_mask(s.pad, s.width), s.requests)
        except StopIteration as stop:
            out = [stop.value[r].tokens for r in range(len(WITH_PAD_ID))]
    return out, w, steps_seen


def test_watch_checks_the_first_round_of_a_prefill_that_fed_nothing():
    """The first round's calls, over empty caches, are that round's draft and verify
    steps (one layout step per step of the decoder), not a prefill's."""
    out, w, steps_seen = watched(STEPS)
    assert out == reference("qwen3", WITH_PAD_ID) and w.violations == [], w.report()
    assert w.steps == steps_seen
    _, w, _ = watched(replace(STEPS, draft_one=corrupt_first))
    first = w.violations[0]
    assert (first.invariant, first.round, first.step, first.model) == ("I4", 1, "draft", "draft"), w.report()


def test_watch_without_boundary_keeps_only_the_calls_over_an_empty_cache():
    """A decoder checked without ``boundary()`` (any decoder not ours) never gets a
    grid: watch keeps the calls over an empty cache for a grid that may still come,
    not every call of the run."""
    target, _ = pair("qwen3")
    with watch(target=target, check="record") as w:
        with torch.no_grad():
            drive(decode(Models(target, None), WITH_PAD_ID[:2], [0, 1], Fixed(0), N, None, STEPS), Stats("autoregressive"),
                  False, None, [], target.device)
    assert w.calls == N and w.violations == []
    assert len(w.prefill) == 1  # the first round's call, which fed the prompts
