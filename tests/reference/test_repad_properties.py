"""Hypothesis properties of the pure padding and realignment operations (Spec §4.4, §4.5)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from batchspec.reference.moves import realign, take_slots
from batchspec.reference.storage import StackedCache, layer_tensors
from batchspec.reference.state import attention_mask, content_index, repad

K_MAX = 5


@st.composite
def ragged(draw):
    """Rows with content c_i >= 1, acceptances 1 <= a_i <= K_MAX + 1, and which rows stay."""
    b = draw(st.integers(1, 8))
    c = draw(st.lists(st.integers(1, 30), min_size=b, max_size=b))
    a = draw(st.lists(st.integers(1, K_MAX + 1), min_size=b, max_size=b))
    keep = draw(st.lists(st.booleans(), min_size=b, max_size=b).filter(any))
    return c, a, keep


@settings(max_examples=200, deadline=None)
@given(ragged())
def test_update_rule_and_i1_i2_after_repad(case):
    c, a, keep = case
    width = max(c)
    length = torch.tensor(c)
    pad = width - length
    plan = repad(pad, length, torch.tensor(a), torch.tensor(keep))
    kept = [i for i, k in enumerate(keep) if k]
    assert plan.rows.tolist() == kept
    new_width = max(c[i] + a[i] for i in kept)  # L' = max(c_i + a_i)
    assert plan.width == new_width
    for b, i in enumerate(kept):
        assert int(plan.pad[b]) == new_width - c[i] - a[i]  # p'_i
        assert int(plan.delta[b]) == new_width - width - a[i]  # δ_i = L' - L - a_i
        assert int(plan.delta[b]) == int(plan.pad[b]) - int(pad[i])  # = p'_i - p_i
    mask = attention_mask(plan.pad, plan.width)
    pos = content_index(plan.pad, 0, plan.width)
    for b in range(len(kept)):
        p = int(plan.pad[b])
        assert mask[b].tolist() == [0] * p + [1] * (plan.width - p)  # I1, no holes
        assert pos[b, p:].tolist() == list(range(plan.width - p))  # I2
    all_equal = len({a[i] for i in kept}) == 1 and all(keep)
    assert plan.realigns == (not all(keep) or any(int(d) != 0 for d in plan.delta))
    if all_equal:
        assert not plan.realigns  # Spec §5.3


@settings(max_examples=150, deadline=None)
@given(ragged(), st.integers(0, K_MAX))
def test_realign_moves_kept_entries_and_drops_rejected(case, extra):
    """Slot values encode (row, content index); after realignment every kept
    entry sits exactly where the spec says and no rejected one survives."""
    c, a, keep = case
    width = max(c)
    k = max(a) - 1 + extra  # drafts verified: every a_i <= k + 1
    b = len(c)
    old_len = width + k  # target cache after verify: L - 1 + (k + 1) slots
    codes = torch.full((b, 1, old_len, 1), -1.0, dtype=torch.float64)
    for i in range(b):
        p = width - c[i]
        for s in range(p, old_len):
            codes[i, 0, s, 0] = 1000 * i + (s - p)  # row i, content index s - p_i
    cache = StackedCache(1)  # batchspec's cache layout (Spec §2.3), filled through the public update path
    cache.update(codes.clone(), codes.clone(), 0)
    length = torch.tensor(c)
    plan = repad(width - length, length, torch.tensor(a), torch.tensor(keep))
    realign(cache, plan.rows, plan.delta, plan.pad, plan.width)
    keys = layer_tensors(cache)[0][0]
    assert keys.shape == (len(plan.rows), 1, plan.width - 1, 1)
    for bb, i in enumerate(plan.rows.tolist()):
        p_new = int(plan.pad[bb])
        got = keys[bb, 0, p_new:, 0].tolist()
        # content tokens 0 .. c_i + a_i - 2: everything but the newest (the bonus)
        assert got == [1000 * i + j for j in range(c[i] + a[i] - 1)]


def _twin_caches(c, a, keep, extra, layers, seed):
    """Two identical stacked caches of random keys/values as they stand after a
    verification pass (``L - 1 + k + 1`` slots), and the repad plan."""
    width, b = max(c), len(c)
    k = max(a) - 1 + extra
    gen = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(b, 2, width + k, 3, generator=gen, dtype=torch.float64) for _ in range(2 * layers)]
    caches = [StackedCache(layers), StackedCache(layers)]
    for cache in caches:
        for layer in range(layers):
            cache.update(tensors[2 * layer].clone(), tensors[2 * layer + 1].clone(), layer)
    length = torch.tensor(c)
    plan = repad(width - length, length, torch.tensor(a), torch.tensor(keep))
    return caches, plan


@settings(max_examples=150, deadline=None)
@given(ragged(), st.integers(0, K_MAX), st.integers(1, 3), st.integers(0, 2**16))
def test_in_place_realign_equals_the_gather_on_every_content_slot(case, extra, layers, seed):
    """Spec §4.5: the in-place ``realign`` EQSPEC uses and the general
    ``take_slots`` gather leave the same keys/values in every content slot
    ``p'_i .. L'-2`` (positive and negative ``δ_i``, rows leaving), the
    same shapes, and only finite values in the padding; the next append
    lands after the moved slots."""
    c, a, keep = case
    (gathered, shifted), plan = _twin_caches(c, a, keep, extra, layers, seed)
    storage = shifted.store.data.data_ptr()
    take_slots(gathered, plan.rows, plan.slots[:, : plan.width - 1])
    realign(shifted, plan.rows, plan.delta, plan.pad, plan.width)
    assert shifted.store.data.data_ptr() == storage  # in place: no new storage
    for (gk, gv), (sk, sv) in zip(layer_tensors(gathered), layer_tensors(shifted)):
        assert sk.shape == gk.shape == (len(plan.rows), 2, plan.width - 1, 3)
        assert torch.isfinite(sk).all() and torch.isfinite(sv).all()
        for b, p in enumerate(plan.pad.tolist()):
            assert torch.equal(sk[b, :, p:], gk[b, :, p:]) and torch.equal(sv[b, :, p:], gv[b, :, p:])
    before = [t.clone() for pair in layer_tensors(shifted) for t in pair]
    for layer in range(layers):
        new = torch.full((len(plan.rows), 2, K_MAX + 1, 3), 7.0, dtype=torch.float64)
        shifted.update(new, new.clone(), layer)
    after = [t for pair in layer_tensors(shifted) for t in pair]
    for old, now in zip(before, after):
        assert torch.equal(now[:, :, : plan.width - 1], old) and bool((now[:, :, plan.width - 1:] == 7.0).all())
