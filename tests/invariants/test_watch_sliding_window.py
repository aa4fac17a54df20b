"""``watch`` on sliding-window layers, alone and mixed with full attention (Spec §3.12.2).

A window layer keeps the newest columns only and attends, from each input,
the ``W`` columns before it: C1's window rule asks that each attended window,
ordered by position, be the newest ``min(W, j + 1)`` elements of one chain.
The same decoder that keeps thrown-away guesses as masked holes is correct
under full attention (silent, exact) and wrong under a window (the hole takes
a token's place in the window): caught, and its output differs. A stale slot
is caught on both kinds; in a model that mixes both, a fault planted in the
window layers alone is caught by the window rule while the full layers are
clean.
"""

from __future__ import annotations


import pytest
import torch
from transformers import DynamicCache, StaticCache

from _spec_helpers import spec_namespace
from _window_models import WINDOW, build, guess_and_check

from batchspec.invariants import InvariantViolation, watch
from batchspec.invariants.window import window_call
from batchspec.invariants.observation import ForwardCall

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # longer than the window
STEPS = 8
WINDOWED = ["mistral", "qwen2", "gemma3"]


def greedy(model, n):
    ids = torch.tensor([PROMPT])
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                          pad_token_id=0)[0, len(PROMPT):].tolist()


def first_rejection(model):
    rejected: list = []
    guess_and_check(model, DynamicCache(config=model.config), PROMPT, STEPS, rejected=rejected)
    assert rejected, "the guesses must be rejected at least once for the bug to show"
    return rejected[0]


@pytest.mark.parametrize("name", WINDOWED)
def test_a_speculative_decoder_over_a_window_cache_is_silent_and_exact(name):
    """Cropping a window layer that records its past, as assisted generation does."""
    model = build(name)
    with watch(target=model) as w:
        out = guess_and_check(model, DynamicCache(config=model.config), PROMPT, STEPS)
    assert out == greedy(model, len(out)) and w.violations == []


@pytest.mark.parametrize("name", WINDOWED)
def test_a_hole_in_a_window_is_caught_where_full_attention_allows_it(name):
    model = build(name)
    with pytest.raises(InvariantViolation) as caught, watch(target=model):
        guess_and_check(model, DynamicCache(config=model.config), PROMPT, STEPS, "hole")
    found = caught.value.violation
    assert (found.invariant, found.call) == ("C1", first_rejection(model) + 1)
    assert f"of its window of {WINDOW}" in found.detail and "hides a token" in found.detail
    out = guess_and_check(model, DynamicCache(config=model.config), PROMPT, STEPS, "hole")
    assert out != greedy(model, len(out))  # the hole is a real fault here
    full = build("llama")  # the same decoder under full attention: holes are allowed, and exact
    with watch(target=full) as w:
        out = guess_and_check(full, DynamicCache(config=full.config), PROMPT, STEPS, "hole")
    assert w.violations == [] and out == greedy(full, len(out))


@pytest.mark.parametrize("name", WINDOWED)
def test_a_stale_slot_in_a_window_is_caught(name):
    model = build(name)
    with pytest.raises(InvariantViolation) as caught, watch(target=model):
        guess_and_check(model, DynamicCache(config=model.config), PROMPT, STEPS, "stale")
    assert (caught.value.violation.invariant, caught.value.violation.call) == ("C1", first_rejection(model) + 1)


@pytest.mark.parametrize("name", ["mistral", "gemma3"])
def test_cropping_a_full_static_window_is_caught(name):
    """A finding: a static window layer that has wrapped cannot be cropped back (transformers
    says so with ``is_croppable``); a decoder that crops it anyway attends a shifted window.
    Caught, and the output is indeed not the greedy one."""
    model = build(name)
    with watch(target=model, check="record") as w:
        out = guess_and_check(model, StaticCache(config=model.config, max_cache_len=64), PROMPT, STEPS)
    assert w.violations and w.violations[0].invariant == "C1" and out != greedy(model, len(out))


def test_a_fault_in_the_window_layers_of_a_mixed_model_is_caught_by_the_window_rule():
    """Gemma 3 (a window layer, a full layer, a window layer): the newest slot of the window
    layers is replaced by an older one's content after the prefill; the full layer is clean."""
    model = build("gemma3")
    cache = DynamicCache(config=model.config)
    windows = [layer for layer in cache.layers if layer.is_sliding]

    def stale(_module, _args, kwargs):
        if kwargs["input_ids"].shape[1] == 1 and not stale.done:  # the first call over a cache
            for layer in windows:
                layer.keys[:, :, -1] = layer.keys[:, :, -2]
                layer.values[:, :, -1] = layer.values[:, :, -2]
            stale.done = True

    stale.done = False
    ids = torch.tensor([PROMPT])
    handle = model.register_forward_pre_hook(stale, with_kwargs=True)  # before watch's: it runs first
    try:
        with watch(target=model, check="record") as w:
            model.generate(ids, attention_mask=torch.ones_like(ids), cache=cache, max_new_tokens=4,
                           do_sample=False, pad_token_id=0)
    finally:
        handle.remove()
    assert w.violations and (w.violations[0].invariant, w.violations[0].call) == ("C1", 2)


def test_a_4d_mask_that_is_no_window_is_refused():
    call = ForwardCall("target", torch.tensor([[3, 4]]), None, None, 8)
    ok = torch.ones(1, 1, 2, WINDOW + 1, dtype=torch.bool).tril(diagonal=WINDOW - 1).triu()  # columns 3 .. 9
    assert window_call(call, ok, WINDOW, 8 - WINDOW + 1)[1].tolist() == [[WINDOW, WINDOW]]
    with pytest.raises(ValueError, match="not a padding mask made causal within a window"):
        window_call(call, torch.ones(1, 1, 2, WINDOW + 1, dtype=torch.bool), WINDOW, 8 - WINDOW + 1)


def test_the_abstract_window_rule_holds_on_a_window_and_fires_on_a_hole_or_a_short_window():
    """Spec §3.12.2's ``one_window``, on the abstract model: windows of 2 and 3 over a chain of 3."""
    spec = spec_namespace()
    call, one_window = spec["ForwardCall"], spec["one_window"]
    rows = [[((5, 0),), ((5, 0), (7, 1)), ((5, 0), (7, 1), (8, 2))]]
    assert one_window(call("target", [[9]], [[1, 1, 1, 1]], [[3]], 3, [[1]]), rows, 2)
    assert spec["one_chain"](call("target", [[9]], [[1, 1, 0, 1]], [[2]], 3, [[1]]), rows[:1], {})  # full: a hole
    assert not one_window(call("target", [[9]], [[1, 1, 0, 1]], [[2]], 3, [[1]]), rows, 2)  # window: a token short
    assert not one_window(call("target", [[9]], [[1, 1, 1, 1]], [[4]], 3, [[1]]), rows, 2)  # a position skipped
    stale = [[((5, 0),), ((5, 0), (7, 1)), ((6, 0), (7, 1), (8, 2))]]  # the newest slot after another prefix
    assert one_window(call("target", [[9]], [[1, 1, 1, 1]], [[3]], 3, [[1]]), rows, 3)
    assert not one_window(call("target", [[9]], [[1, 1, 1, 1]], [[3]], 3, [[1]]), stale, 3)


def test_a_window_only_call_lets_its_logits_go_when_its_hook_ends():
    """A model whose every layer attends a window is read through a copy of the call
    (the window's columns); the chains carried to the next call keep no logits of it."""
    import gc
    import weakref

    model = build("mistral")
    ids = torch.tensor([PROMPT])
    with watch(target=model) as w, torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), cache=DynamicCache(config=model.config)).logits
        gone = weakref.ref(logits)
        del logits
        gc.collect()
        assert gone() is None, "watch keeps the window call's logits alive"
    assert w.calls == 1 and not w.violations
