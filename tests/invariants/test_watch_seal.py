"""``watch`` hashes a call only where it wrote (Spec §3.12.1, ``hf_cache.Seal``).

After each call the bits its content hashes were read from are kept; at the
next call the cached columns are compared with them bit for bit and only the
columns that differ or are new are hashed. A cache the decoder leaves alone
(dynamic or static) is hashed one call's columns at a time; a write into it,
whichever way it was made, makes the next call hash every column, and what
the write changed is caught at that call.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, StaticCache

from _window_models import build

from batchspec.invariants import InvariantViolation, hf_cache, watch
from batchspec.invariants.slots import Hasher

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]]
STEPS = 6


@pytest.fixture(params=["default glance", "glance from 1 column"])
def widths(monkeypatch, request):
    """The column count of every hash the checker takes, in order."""
    seen: list = []
    word_hashes = Hasher.word_hashes  # every content hash goes through it

    def spy(self, bits, out=None):
        seen.append(bits.shape[1])
        return word_hashes(self, bits, out=out)

    monkeypatch.setattr(Hasher, "word_hashes", spy)
    if request.param == "glance from 1 column":  # the newest kept column compared alone first, at every call
        monkeypatch.setattr(hf_cache, "GLANCE", 1)
    return seen


@torch.no_grad()
def greedy(model, write=None, cache=None) -> list:
    """Plain batched greedy decoding, one token a call, over ``cache`` (a fresh
    DynamicCache by default); ``write(cache, step)`` may touch the cache before
    each call after the prefill."""
    cache = DynamicCache(config=model.config) if cache is None else cache
    ids = torch.tensor(PROMPTS)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache).logits
    out = [logits[:, -1].argmax(-1)]
    for step in range(STEPS):
        if write is not None:
            write(cache, step)
        t = cache.get_seq_length()
        logits = model(input_ids=out[-1][:, None], attention_mask=torch.ones((2, t + 1), dtype=torch.long),
                       cache=cache).logits
        out.append(logits[:, -1].argmax(-1))
    return torch.stack(out, 1).tolist()


def test_an_untouched_dynamic_cache_is_hashed_only_where_each_call_wrote(widths):
    model = build("llama")
    with watch(target=model) as w:
        greedy(model)
    assert w.violations == [] and w.calls == STEPS + 1
    assert widths == [len(PROMPTS[0])] + [1] * STEPS
    assert 0 < w.correctness.seal.reread_cpu_seconds < w.check_cpu_seconds  # the compare, timed apart
    assert w.correctness.seal.hashed_columns == sum(widths) == len(PROMPTS[0]) + STEPS  # counted apart too


def test_a_static_cache_written_in_place_is_hashed_only_where_each_call_wrote(widths):
    model = build("llama")
    with watch(target=model) as w:
        out = greedy(model, cache=StaticCache(config=model.config, max_cache_len=32))
    assert w.violations == [] and out == greedy(model)
    assert widths[:STEPS + 1] == [len(PROMPTS[0])] + [1] * STEPS


def _zero_slot(cache, step, through_data=False, slot=1):
    """Before the call after ``step == 2``: zero slot ``slot`` of the first layer's keys, in place."""
    if step == 2:
        keys = cache.layers[0].keys
        (keys.data if through_data else keys)[:, :, slot] = 0


def test_a_write_into_a_sealed_cache_is_hashed_whole_and_caught_at_that_call(widths):
    model = build("llama")
    with pytest.raises(InvariantViolation) as caught, watch(target=model) as w:
        greedy(model, _zero_slot)
    found = caught.value.violation
    assert (found.invariant, found.call) == ("C1", 4)  # call 1 is the prefill; the write precedes call 4
    assert widths == [len(PROMPTS[0]), 1, 1, len(PROMPTS[0]) + 3]  # the broken seal: every column hashed again
    assert w.correctness.seal.hashed_columns == sum(widths)


def test_a_write_through_data_is_caught_at_that_call_as_well(widths):
    """``.data`` writes bump no version counter: the comparison reads the bits themselves."""
    model = build("llama")
    with pytest.raises(InvariantViolation) as caught, watch(target=model):
        greedy(model, lambda cache, step: _zero_slot(cache, step, through_data=True))
    assert (caught.value.violation.invariant, caught.value.violation.call) == ("C1", 4)
    assert widths == [len(PROMPTS[0]), 1, 1, len(PROMPTS[0]) + 3]


def test_a_write_into_the_newest_column_is_hashed_whole_and_caught_at_that_call(widths):
    """The newest kept column is the one the glance reads: a write there breaks the seal at
    once; a write further back (the tests above) passes the glance and fails the whole compare."""
    model = build("llama")
    newest = len(PROMPTS[0]) + 1  # the columns cached before the call after step 2, less one
    with pytest.raises(InvariantViolation) as caught, watch(target=model):
        greedy(model, lambda cache, step: _zero_slot(cache, step, slot=newest))
    assert (caught.value.violation.invariant, caught.value.violation.call) == ("C1", 4)
    assert widths == [len(PROMPTS[0]), 1, 1, len(PROMPTS[0]) + 3]


def test_no_identity_or_version_tells_an_append_from_an_overwrite():
    """Why the seal reads the bits (its docstring): between two calls that only append, a
    dynamic layer's keys are a new tensor every call and a static layer's keys bump their
    version every call, exactly as when something also overwrote an old column; a write
    through ``.data`` bumps no version at all."""
    model = build("llama")
    held: list = []  # the keys tensors themselves, kept alive so that no identity is reused
    greedy(model, lambda cache, step: held.append(cache.layers[0].keys))
    assert len(held) == STEPS and all(a is not b for i, a in enumerate(held) for b in held[i + 1:])
    versions: list = []
    static = StaticCache(config=model.config, max_cache_len=32)
    greedy(model, lambda cache, step: versions.append(cache.layers[0].keys._version), cache=static)
    assert len(versions) == STEPS and all(b > a for a, b in zip(versions, versions[1:]))
    keys = static.layers[0].keys
    before = keys._version
    keys.data[:, :, 1] = 0
    assert keys._version == before and bool((keys[:, :, 1] == 0).all())
