"""``watch`` on transformers' own assisted generation (Spec §3.12), with no glue.

Correct, it is silent on three pairs (the embedded default pair, a tiny Llama
and a tiny Qwen3) and exact. Bugs planted through public objects, a cache
layer's ``crop`` and the target's forward hooks, are caught at the first
wrong call, found (``_call_diff``) as in ``test_correctness_invariants`` by comparing every
call with those of a correct run.
"""

from __future__ import annotations


import pytest
import torch
from transformers.cache_utils import DynamicLayer

from _broken_helpers import WITH_PAD_ID, pair
from _call_diff import first_divergence

from batchspec.demo_pair import demo_pair
from batchspec.invariants import InvariantViolation, watch
from batchspec.models import tiny

N = 16


def pairs():
    default = demo_pair(3, torch.float64)
    return {"default": (default.target, default.draft, default.prompts),
            "llama": tiny.pair("llama", "perturbed", seed=0) + (WITH_PAD_ID,),
            "qwen3": pair("qwen3") + (WITH_PAD_ID,)}


@torch.no_grad()
def assisted(target, draft, prompt):
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft, do_sample=False,
                          max_new_tokens=N, min_new_tokens=N, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


@torch.no_grad()
def plain(target, prompt):
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=N,
                          min_new_tokens=N, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


def without_pad_id(target, prompts):
    """The prompts whose greedy output never holds the pad id 0 (see the next test)."""
    return [p for p in prompts if 0 not in plain(target, p)]


@pytest.mark.slow_except('llama')
@pytest.mark.parametrize("name", ["default", "llama", "qwen3"])
def test_assisted_generation_is_exact_and_silent(name):
    target, draft, prompts = pairs()[name]
    prompts = without_pad_id(target, prompts)
    assert len(prompts) >= 2
    with watch(target=target, draft=draft) as w:  # check="raise"
        outs = [assisted(target, draft, p) for p in prompts]
        w.outputs(prompts, outs, max_new_tokens=N)
    assert outs == [plain(target, p) for p in prompts]
    assert w.violations == [] and w.calls > 4 * len(prompts)


def test_assisted_generation_masks_a_generated_pad_id_in_its_drafts_context():
    """A finding, not a planted bug: once the target generates the pad id,
    transformers' assistant (which ``generate`` is called without an attention
    mask, so one is inferred from ``input_ids != pad_token_id``) masks that
    committed token out while its positions still count it. C1 flags the first
    draft call that does so, and every later draft call that still hides it,
    each with that cause; the output stays exact (the draft only decides how
    many tokens a round commits, Spec §5.2)."""
    target, draft, prompts = pairs()["qwen3"]
    found = [p for p in prompts if 0 in plain(target, p)]
    assert len(found) >= 2
    cause = "a mask derived from token values hides every token equal to the pad id 0"
    for prompt in found:  # (on the second, the pad id comes early: many later draft calls hide it)
        with watch(target=target, draft=draft, check="record") as w:
            out = assisted(target, draft, prompt)
            w.outputs([prompt], [out], max_new_tokens=N)
        assert out == plain(target, prompt)
        v = w.violations[0]
        assert (v.invariant, v.model) == ("C1", "draft") and "position" in v.detail, w.report()
        assert "masked out where this call feeds it" in v.detail  # not "cropped, dropped or never written"
        assert {x.model for x in w.violations} == {"draft"}
        assert all(cause in x.detail for x in w.violations), w.report()


class Planted:
    """A bug planted in the target's cache through public objects (a layer class's
    ``crop``, a forward pre-hook that notes which cache the target runs with),
    undone on exit. The draft's cache is left alone, so the first wrong call is
    the target's."""

    def __init__(self, kind: str, target):
        self.kind, self.target, self.original, self.layers = kind, target, DynamicLayer.crop, set()

    def __enter__(self):
        original, kind, layers = self.original, self.kind, self.layers

        keep = self.keep = []  # the layers themselves, so that no id is reused by a draft layer later

        def note(_module, _args, kwargs):
            cache = kwargs.get("cache")
            keep.extend(getattr(cache, "layers", ()))
            layers.update(id(layer) for layer in getattr(cache, "layers", ()))

        def crop(layer, tokens_to_remove):
            if id(layer) not in layers:
                return original(layer, tokens_to_remove)
            if kind == "stale_slot":  # off by one: a rejected draft's slot survives the crop
                return original(layer, tokens_to_remove + 1) if tokens_to_remove < -1 else None
            original(layer, tokens_to_remove)
            if kind == "neighbour" and layer.keys.shape[2] > 1:
                layer.keys[:, :, -1] = layer.keys[:, :, -2]  # the newest slot holds its neighbour's key/value
                layer.values[:, :, -1] = layer.values[:, :, -2]

        self.handle = self.target.register_forward_pre_hook(note, with_kwargs=True)
        DynamicLayer.crop = crop
        return self

    def __exit__(self, *exc):
        DynamicLayer.crop = self.original
        self.handle.remove()


def wrong_bonus(target):
    """A hook after the target's forward that makes the last position's choice the runner-up:
    assisted generation then commits a bonus token that is not the target's."""
    def hook(_module, _args, output):
        logits = output.logits
        top2 = logits[:, -1].topk(2).indices
        logits[:, -1].scatter_(-1, top2[:, 1:], logits[:, -1].max(-1, keepdim=True).values + 1)
        return output

    return target.register_forward_hook(hook)


def run_prompts(target, draft, prompts):
    return lambda: [assisted(target, draft, p) for p in prompts]


@pytest.mark.slow
@pytest.mark.parametrize("kind,invariant", [("stale_slot", "C1"), ("neighbour", "C1")])
def test_planted_cache_bugs_are_caught_at_the_first_wrong_call(kind, invariant):
    target, draft, prompts = pairs()["qwen3"]
    correct = run_prompts(target, draft, prompts)

    def faulty():
        with Planted(kind, target):
            return correct()

    first = first_divergence(target, draft, correct, faulty)
    with pytest.raises(InvariantViolation) as caught:
        with watch(target=target, draft=draft) as w:
            outs = faulty()
            w.outputs(prompts, outs, max_new_tokens=N)
    assert (caught.value.invariant, caught.value.call) == (invariant, first), str(caught.value)
    assert faulty() != [plain(target, p) for p in prompts]


def test_a_planted_token_choice_bug_is_caught_at_the_first_wrong_call():
    target, draft, prompts = pairs()["qwen3"]
    correct = run_prompts(target, draft, prompts[:1])

    def faulty():
        handle = wrong_bonus(target)
        try:
            return correct()
        finally:
            handle.remove()

    first = first_divergence(target, draft, correct, faulty)
    with watch(target=target, draft=draft, check="record") as w:  # watch's hook sees the true logits first
        outs = faulty()
        w.outputs(prompts[:1], outs, max_new_tokens=N)
    v = w.violations[0]
    assert (v.invariant, v.call) == ("C1", first), w.report()  # the next target call attends it (Spec §3.12.2)
    assert outs != [plain(target, prompts[0])]
