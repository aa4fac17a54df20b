"""Bad input raises a ValueError naming the argument, before any model runs."""

from __future__ import annotations

import pytest
import torch

import batchspec
from batchspec.models import tiny


class Spy:
    """Counts forward calls of a model (and fails the test if there are any)."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self.hook)

    def hook(self, *_):
        self.calls += 1


@pytest.fixture(scope="module")
def models():
    target, draft = tiny.pair("llama", "perturbed")
    return target, draft


CASES = [
    ({"prompts": [[3, 4], []]}, "prompts[1]"),
    ({"prompts": [[3, 96]]}, "prompts[0][1]"),
    ({"prompts": [[3, -1]]}, "prompts[0][1]"),
    ({"prompts": "hello"}, "prompts"),
    ({"num_draft_tokens": 0}, "num_draft_tokens"),
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"batch_size": 0}, "batch_size"),
    ({"method": "beam"}, "method"),
    ({"eos_token_id": 500}, "eos_token_id"),
    ({"eos_token_id": []}, "eos_token_id"),
    ({"check_invariants": "yes"}, "check_invariants"),
    ({"max_new_tokens": 1000}, "max_position_embeddings"),
]


@pytest.mark.parametrize("change,needle", CASES, ids=[c[1] + str(i) for i, c in enumerate(CASES)])
def test_bad_argument_named(models, change, needle):
    target, draft = models
    spies = [Spy(target), Spy(draft)]
    kwargs = {"prompts": [[3, 4, 5]], **change}
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        batchspec.generate(target, draft, **kwargs)
    for spy in spies:
        spy.handle.remove()
        assert spy.calls == 0


def test_vocabulary_mismatch(models):
    target, _ = models
    other = tiny.build("llama", seed=5, dtype=torch.float64)
    other.resize_token_embeddings(tiny.VOCAB + 8)
    with pytest.raises(ValueError, match="draft: vocabulary size 104 differs from the target's 96"):
        batchspec.generate(target, other, [[3, 4]])


def test_dtype_mismatch(models):
    target, _ = models
    draft32 = tiny.build("llama", seed=9, dtype=torch.float32)
    with pytest.raises(ValueError, match="draft: dtype torch.float32"):
        batchspec.generate(target, draft32, [[3, 4]])


def test_missing_draft(models):
    with pytest.raises(ValueError, match="draft: method 'eqspec' needs a draft"):
        batchspec.generate(models[0], None, [[3, 4]])


def test_device_mismatch_is_named():
    target, draft = tiny.pair("llama", "perturbed")
    # a draft that reports another device (no second device is needed to check the message)
    draft.__class__ = type("Elsewhere", (type(draft),), {"device": property(lambda self: torch.device("meta"))})
    with pytest.raises(ValueError, match="draft: on device meta, target on cpu"):
        batchspec.generate(target, draft, [[3, 4]])


def test_eager_attention_refused():
    target = tiny.build("llama", seed=1)
    target.config._attn_implementation = "eager"
    with pytest.raises(ValueError, match="target: attn_implementation='eager'"):
        batchspec.generate(target, None, [[3, 4]], method="autoregressive")


def test_no_prompts_is_an_empty_result(models):
    result = batchspec.generate(*models, [])
    assert result.sequences == [] and result.stats.rounds == 0
