"""``watch`` on static caches (Spec §3.12.1): read at the slots each call writes, never whole.

transformers' ``StaticCache`` preallocates ``max_cache_len`` slots per layer and
writes each call at its own ``cumulative_length``; it is not iterable, and
``generate`` passes it masks over every preallocated slot. A correct decoder
over it is silent; one that leaves a thrown-away guess attended is caught at
the first call that attends it.
"""

from __future__ import annotations


import pytest
import torch
from transformers import StaticCache

from _window_models import build, guess_and_check

from batchspec.invariants import InvariantViolation, watch
from batchspec.invariants.slots import Hasher

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
STEPS = 8


def greedy(model, n):
    ids = torch.tensor([PROMPT])
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                          pad_token_id=0)[0, len(PROMPT):].tolist()


@pytest.mark.parametrize("name", ["llama", "gpt2", "gpt_neox"])
def test_a_speculative_decoder_over_a_static_cache_is_silent_and_exact(name):
    model = build(name)
    with watch(target=model) as w:
        out = guess_and_check(model, StaticCache(config=model.config, max_cache_len=64), PROMPT, STEPS)
    assert out == greedy(model, len(out)) and w.violations == [] and w.calls == STEPS + 1


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_stale_slot_in_a_static_cache_is_caught_at_the_first_call_that_attends_it(name):
    """The guess's slot is neither cropped nor masked: the next call attends it."""
    model = build(name)
    rejected: list = []
    guess_and_check(model, StaticCache(config=model.config, max_cache_len=64), PROMPT, STEPS, rejected=rejected)
    assert rejected, "the guesses must be rejected at least once for the bug to show"
    with pytest.raises(InvariantViolation) as caught, watch(target=model):
        guess_and_check(model, StaticCache(config=model.config, max_cache_len=64), PROMPT, STEPS, "stale")
    found = caught.value.violation
    assert (found.invariant, found.call, found.row) == ("C1", rejected[0] + 1, 0)


def test_a_static_cache_is_read_only_where_written(monkeypatch):
    """1024 preallocated slots, a few dozen written: no call hashes more than the stream it has."""
    model = build("llama")
    widths = []
    word_hashes = Hasher.word_hashes  # every content hash goes through it

    def spy(self, bits, out=None):
        widths.append(bits.shape[1])
        return word_hashes(self, bits, out=out)

    monkeypatch.setattr(Hasher, "word_hashes", spy)
    with watch(target=model) as w:
        out = guess_and_check(model, StaticCache(config=model.config, max_cache_len=1024), PROMPT, STEPS)
    assert w.violations == [] and widths and max(widths) <= len(PROMPT) + 2 * len(out)
