"""A prefill that feeds nothing (Spec §4.1, ``fill=False``): every call feeds the
slots its cache lacks, so the first draft call and the first verification feed
the prompt themselves. Exact, one target call per token at batch 1 (as
``generate``), every layout invariant silent; and I4 fires when such a call
feeds a committed slot wrongly."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import torch

from batchspec.driver import drive
from batchspec.invariants import InvariantViolation
from batchspec.reference import Models
from batchspec.reference.eqspec import STEPS, decode
from batchspec.reference.steps import draft_one, prefill
from batchspec.reference.storage import cache_length
from batchspec.stats import Stats
from batchspec.testing import random_prompts

PROMPTS = random_prompts(seed=3, count=4, low=2, high=12)
NEW = 8
LAZY = replace(STEPS, prefill=partial(prefill, fill=False))


def run(models, steps, k, batch):
    calls = []
    hook = models.target.register_forward_hook(lambda *_: calls.append(1))
    outputs = {}
    try:
        with torch.no_grad():
            for first in range(0, len(PROMPTS), batch):
                requests = list(range(first, min(first + batch, len(PROMPTS))))
                decoder = decode(models, [PROMPTS[r] for r in requests], requests, k, NEW, None, steps)
                outputs.update(drive(decoder, Stats("eqspec"), True, None, [], models.target.device))
    finally:
        hook.remove()
    return [outputs[r].tokens for r in range(len(PROMPTS))], len(calls)


@pytest.mark.parametrize("draft", [True, False])
def test_a_prefill_that_feeds_nothing_is_exact_silent_and_makes_no_extra_call(pairs, greedy_reference, draft):
    target, drafter = pairs("qwen3", "perturbed")
    models = Models(target, drafter if draft else None)
    k = 3 if draft else 0
    lazy, lazy_calls = run(models, LAZY, k, batch=1)
    filled, filled_calls = run(models, STEPS, k, batch=1)
    assert lazy == filled == [greedy_reference(target, p, NEW) for p in PROMPTS]
    assert lazy_calls == filled_calls - len(PROMPTS)  # one prefill call fewer per request
    if not draft:
        assert lazy_calls == len(PROMPTS) * NEW  # as generate: the first token from the prompt's logits
    assert run(models, LAZY, k, batch=3)[0] == lazy  # ragged batches too


def test_i4_fires_on_a_first_call_that_feeds_a_wrong_prompt_token(pairs):
    target, drafter = pairs("qwen3", "perturbed")

    def corrupt_first(models, state, rnd, calls):
        """Feed the prompt with its second-newest token changed (the grid itself untouched)."""
        if cache_length(state.draft_cache) == 0:  # the call that feeds the prompt
            tokens = state.tokens.clone()
            tokens[:, -2] = (tokens[:, -2] + 1) % 50 + 2
            return draft_one(models, replace(state, tokens=tokens), rnd, calls)
        return draft_one(models, state, rnd, calls)

    steps = replace(LAZY, draft_one=corrupt_first)
    with pytest.raises(InvariantViolation, match="does not feed the committed slots after them"):
        run(Models(target, drafter), steps, 2, batch=2)
