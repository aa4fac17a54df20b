"""Hypothesis properties of the pure padding and realignment operations (Spec §4.4, §4.5)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from batchspec.reference import cache as kv
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
    plan = repad(pad, length, torch.tensor(a), torch.tensor(keep), width)
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
    assert plan.moves == (not all(keep) or any(int(d) != 0 for d in plan.delta))
    if all_equal:
        assert not plan.moves  # Spec §5.3


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
    cache = kv.StackedCache(1)  # batchspec's cache layout (Spec §2.3), filled through the public update path
    cache.update(codes.clone(), codes.clone(), 0)
    length = torch.tensor(c)
    plan = repad(width - length, length, torch.tensor(a), torch.tensor(keep), width)
    kv.realign(cache, plan.rows, plan.slots[:, : plan.width - 1])
    keys = kv.layer_tensors(cache)[0][0]
    assert keys.shape == (len(plan.rows), 1, plan.width - 1, 1)
    for bb, i in enumerate(plan.rows.tolist()):
        p_new = int(plan.pad[bb])
        got = keys[bb, 0, p_new:, 0].tolist()
        # content tokens 0 .. c_i + a_i - 2: everything but the newest (the bonus)
        assert got == [1000 * i + j for j in range(c[i] + a[i] - 1)]
