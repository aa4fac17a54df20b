"""The layer-stacked cache (Spec §2.3, §4.5): appends in place, per-layer
views of exactly the live slots, the general slot gather that is one gather
per model, and EQSPEC's in-place realignment that is one copy per moving row,
both whatever the layer count, and an EQSPEC decode that never grows
its caches. About 6 s."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

import batchspec
from batchspec.reference import storage
from batchspec.reference.moves import crop_to, realign, take_slots
from batchspec.reference.storage import StackedCache, cache_length, layer_tensors
from batchspec.testing import random_prompts


class Counting(TorchFunctionMode):
    """Counts the tensor operations run inside it, by name."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def filled(layers: int, batch: int = 3, heads: int = 2, slots: int = 7, dim: int = 4, seed: int = 0):
    """A stacked cache filled through the public update path, and its per-layer truth."""
    gen = torch.Generator().manual_seed(seed)
    cache = StackedCache(layers)
    truth = []
    for layer in range(layers):
        k, v = (torch.randn(batch, heads, slots, dim, generator=gen, dtype=torch.float64) for _ in range(2))
        cache.update(k, v, layer)
        truth.append((k, v))
    return cache, truth


def test_layer_tensors_are_the_live_slots_and_appends_keep_them():
    cache, truth = filled(layers=3)
    assert cache_length(cache) == 7
    for (k, v), (tk, tv) in zip(layer_tensors(cache), truth):
        assert k.shape == (3, 2, 7, 4) and torch.equal(k, tk) and torch.equal(v, tv)
    extra = [(torch.ones(3, 2, 30, 4, dtype=torch.float64) * i,) * 2 for i in range(3)]  # forces a larger buffer
    for layer, (k, v) in enumerate(extra):
        cache.update(k, v, layer)
    for (k, _), (tk, _), (ek, _) in zip(layer_tensors(cache), truth, extra):
        assert k.shape[2] == 37 and torch.equal(k[:, :, :7], tk) and torch.equal(k[:, :, 7:], ek)
    crop_to(cache, 5)
    assert [k.shape[2] for k, _ in layer_tensors(cache)] == [5, 5, 5]
    assert torch.equal(layer_tensors(cache)[2][0], truth[2][0][:, :, :5])


def test_take_slots_matches_the_per_row_definition():
    cache, truth = filled(layers=2, batch=4, slots=9)
    rows = torch.tensor([0, 2, 3])
    delta = torch.tensor([2, 0, -1])
    width = 8
    slots = (torch.arange(width)[None, :] - delta[:, None]).clamp(min=0)  # [B', T'] as repad builds it
    take_slots(cache, rows, slots)
    for (k, v), (tk, tv) in zip(layer_tensors(cache), truth):
        assert k.shape == (3, 2, width, 4)
        for b, (row, d) in enumerate(zip(rows.tolist(), delta.tolist())):
            for s in range(width):
                assert torch.equal(k[b, :, s], tk[row, :, max(s - d, 0)])
                assert torch.equal(v[b, :, s], tv[row, :, max(s - d, 0)])
    # the next round appends after the moved slots without disturbing them
    before = [k.clone() for k, _ in layer_tensors(cache)]
    for layer in range(2):
        cache.update(torch.zeros(3, 2, 3, 4, dtype=torch.float64), torch.zeros(3, 2, 3, 4, dtype=torch.float64), layer)
    for (k, _), b in zip(layer_tensors(cache), before):
        assert torch.equal(k[:, :, :width], b) and not k[:, :, width:].any()


@pytest.mark.parametrize("layers", [1, 6, 24])
def test_take_slots_is_one_gather_whatever_the_layer_count(layers):
    cache, _ = filled(layers=layers)
    rows, slots = torch.tensor([1, 2]), torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]])
    with Counting() as mode:
        take_slots(cache, rows, slots)
    assert mode.calls.get("index_select", 0) == 1
    # slicing each layer's views (``__getitem__``) copies nothing; every other op is a fixed handful
    copies = {name: n for name, n in mode.calls.items() if name not in ("__getitem__", "__get__")}
    assert sum(copies.values()) < 20, copies


@pytest.mark.parametrize("layers", [1, 6, 24])
def test_realign_is_one_copy_per_moving_row_whatever_the_layer_count(layers):
    """Spec §4.5: a row that stays put is not touched, a row that takes another
    row's index is one copy, a row moving within itself two (through the
    one-row scratch); nothing else copies or allocates a cache-sized tensor."""
    cache, truth = filled(layers=layers, batch=5, slots=9)
    storage = cache.store.data.data_ptr()
    rows = torch.tensor([0, 1, 3, 4])  # row 2 leaves
    delta = torch.tensor([0, 2, 0, -1])  # row 0 stays put; row 1 moves within itself; rows 3, 4 change index
    pad = torch.tensor([1, 3, 1, 0])  # p'_i; old p_i = p'_i - δ_i = 1 for every row
    with Counting() as mode:
        realign(cache, rows, delta, pad, 9)
    assert mode.calls.get("__setitem__", 0) == 3 and mode.calls.get("copy_", 0) == 1, mode.calls
    assert not {"index_select", "cat", "clone", "new_zeros", "gather"} & set(mode.calls), mode.calls
    assert cache.store.data.data_ptr() == storage
    for (k, _), (tk, _) in zip(layer_tensors(cache), truth):
        assert k.shape == (4, 2, 8, 4)
        for b, (row, d, q) in enumerate(zip(rows.tolist(), delta.tolist(), pad.tolist())):
            assert torch.equal(k[b, :, q:], tk[row, :, q - d: 8 - d])


def test_mismatched_layer_shapes_are_refused():
    cache, _ = filled(layers=2)
    with pytest.raises(ValueError, match="do not fit the stacked cache"):
        cache.update(torch.zeros(3, 5, 1, 4), torch.zeros(3, 5, 1, 4), 1)


def test_eqspec_never_grows_its_caches(pairs, monkeypatch):
    """Spec §2.3: EQSPEC's prefill reserves L + max_new_tokens slots, enough for
    the whole decode, so no round allocates a cache-sized tensor: the storage
    never grows and realignment moves rows inside it (ragged prompts, rows
    leaving at EOS). Fires if the reservation is short: a grow is recorded."""
    grown, original = [], storage.Store.grow
    monkeypatch.setattr(storage.Store, "grow", lambda store, needed: (grown.append(needed), original(store, needed)))
    target, draft = pairs("llama")
    prompts = random_prompts(seed=7, count=6)
    result = batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=4, max_new_tokens=24,
                                batch_size=6, eos_token_id=7, check_invariants=True)
    assert result.stats.realignments > 0 and grown == []
    # negative control: the same decode with no reservation grows
    monkeypatch.setattr(storage, "new_cache", lambda model, capacity=0, new=storage.new_cache: new(model))
    batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=4, max_new_tokens=24,
                       batch_size=6, eos_token_id=7)
    assert grown


@pytest.mark.slow_except('eqspec')
@pytest.mark.parametrize("method", ["autoregressive", "eqspec", "exspec"])
def test_a_finished_batch_frees_its_caches_without_the_cycle_collector(pairs, monkeypatch, method):
    """A cache's storage dies with its last reference, not at the next run of
    Python's cycle collector: a store and its layers must not reference each
    other strongly. With the cycle, every static batch of a ``generate``
    call kept its caches until the collector ran, so the peak memory grew with
    the number of batches (4 batches of one prompt: 4x the cache at batch 1).
    Fires if the layer holds its store strongly (checked below)."""
    import gc
    import weakref

    stores, original = [], storage.new_cache

    def spy(model, capacity=0):
        cache = original(model, capacity)
        stores.append(weakref.ref(cache.store))
        return cache

    monkeypatch.setattr(storage, "new_cache", spy)
    target, draft = pairs("llama")
    prompts = random_prompts(seed=3, count=4)
    gc.collect()
    gc.disable()
    try:
        batchspec.generate(target, None if method == "autoregressive" else draft, prompts, method=method,
                           num_draft_tokens=3, max_new_tokens=8, batch_size=2)
        assert stores and [r for r in stores if r() is not None] == []
        # negative control: a strong reference back from a layer keeps the store alive
        cache = original(target, 8)
        cache.layers[0]._store = lambda store=cache.store: store  # a strong reference: the cycle avoided
        ref = weakref.ref(cache.store)
        del cache
        assert ref() is not None
    finally:
        gc.enable()
        gc.collect()


def test_a_deep_copy_of_a_cache_writes_its_own_store():
    """``copy.deepcopy`` of a cache (the exhaustive check copies the state per
    branch) gives layers over the copy's store, not the original's: an append
    to the copy leaves the original as it was. Fires if a layer's weak
    reference to its store were copied as it is: the copy's layers would
    point at the original's store (checked first; shown to fail without
    ``StackedLayer.__deepcopy__``), and the append would write into it."""
    import copy

    cache, truth = filled(layers=2, batch=3, slots=4)
    twin = copy.deepcopy(cache)
    assert twin.store is not cache.store and all(layer.store is twin.store for layer in twin.layers)
    extra = torch.ones(3, 2, 1, 4, dtype=torch.float64)
    for layer in range(2):
        twin.update(extra, extra, layer)
    assert cache_length(twin) == 5 and cache_length(cache) == 4
    for (keys, values), (k, v) in zip(layer_tensors(cache), truth):
        assert torch.equal(keys, k) and torch.equal(values, v)
    for (keys, _), (k, _) in zip(layer_tensors(twin), truth):
        assert torch.equal(keys[:, :, :4], k) and torch.equal(keys[:, :, 4:], extra)
