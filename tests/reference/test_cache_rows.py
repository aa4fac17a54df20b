"""EXSPEC's per-sequence caches (Spec §8.3): a pool member's :class:`Row`,
stacked into a batch in one copy per row, into the previous batch's storage
when it is large enough, and split back by copying only the slots a round
appended, without ever changing a Row another holder reads (Spec §8.6).
About 1 s."""

from __future__ import annotations

import torch

from batchspec.reference.rows import Row, split, stack
from batchspec.reference.storage import StackedCache, cache_length, stacked_tensor

LAYERS, HEADS, DIM = 3, 2, 4


class Model:
    """What :func:`~batchspec.reference.storage.new_cache` reads of a model: its layer count."""

    class config:  # noqa: N801 - the attribute transformers models have
        @staticmethod
        def get_text_config(decoder=True):
            return type("C", (), {"num_hidden_layers": LAYERS})


def row(length: int, seed: int, room: int = 8) -> Row:
    data = torch.randn(2 * LAYERS, 1, HEADS, length + room, DIM, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)
    return Row(data, length)


def append(cache: StackedCache, n: int, seed: int) -> torch.Tensor:
    """Append ``n`` slots to every layer through the update path a forward call takes;
    returns them stacked ``[2·layers, B, H, n, D]``."""
    gen = torch.Generator().manual_seed(seed)
    new = torch.randn(2 * LAYERS, cache.store.rows, HEADS, n, DIM, generator=gen, dtype=torch.float64)
    for layer in range(LAYERS):
        cache.update(new[2 * layer], new[2 * layer + 1], layer)
    return new


def test_stack_places_each_row_after_its_padding():
    rows, pad = [row(5, 0), row(3, 1)], [0, 2]
    cache = stack(Model, rows, pad)
    stacked = stacked_tensor(cache)  # [2·layers, 2, H, 5, D]
    assert torch.equal(stacked[:, 0], rows[0].stacked()[:, 0])
    assert torch.equal(stacked[:, 1, :, 2:], rows[1].stacked()[:, 0])
    assert [pair[0].shape for pair in rows[1].layers()] == [(1, HEADS, 3, DIM)] * LAYERS


def test_split_copies_only_the_new_slots_and_leaves_the_old_row_as_it_was():
    rows, pad = [row(5, 0), row(3, 1)], [0, 2]
    before = [r.stacked().clone() for r in rows]
    cache = stack(Model, rows, pad)
    new = append(cache, 2, seed=7)  # a round appends 2 slots to every row
    out = split(cache, [(0, 0, 6), (1, 2, 7)])  # row 0 kept 1 of them, row 1 both
    assert [r.length for r in out] == [6, 5]
    assert all(o.data is r.data for o, r in zip(out, rows))  # extended in their own storage, no copy of old slots
    assert torch.equal(out[0].stacked()[:, 0, :, 5:], new[:, 0, :, :1])
    assert torch.equal(out[1].stacked()[:, 0, :, 3:], new[:, 1])
    for r, b in zip(rows, before):  # the shorter Rows read what they read before
        assert torch.equal(r.stacked(), b)


def test_a_row_is_extended_once_and_any_other_span_is_copied():
    rows = [row(4, 0), row(4, 1)]
    cache = stack(Model, rows, [0, 0])
    append(cache, 1, seed=3)
    first, again = split(cache, [(0, 0, 5)])[0], split(cache, [(0, 0, 5)])[0]
    assert first.data is rows[0].data and again.data is not rows[0].data  # never two members on one storage
    assert torch.equal(first.stacked(), again.stacked())
    shifted = split(cache, [(1, 1, 5)])[0]  # not the slots row 1 was stacked from: a copy
    assert shifted.data is not rows[1].data
    assert torch.equal(shifted.stacked()[:, 0], stacked_tensor(cache)[:, 1, :, 1:5])
    short = row(2, 5, room=0)  # no room left to grow in place: copied into storage with room
    grown = split(stack(Model, [short], [0]), [(0, 0, 2)])[0]
    assert grown.data is short.data
    c = stack(Model, [grown], [0])
    append(c, 1, seed=4)
    assert split(c, [(0, 0, 3)])[0].data is not short.data


def test_a_row_stacked_twice_is_extended_by_one_row_at_most():
    shared = row(3, 0)
    cache = stack(Model, [shared, shared], [0, 0])
    append(cache, 1, seed=1)
    out = split(cache, [(0, 0, 4), (1, 0, 4)])
    assert out[0].data is not out[1].data and [o.data is shared.data for o in out].count(True) <= 1
    for b, o in enumerate(out):
        assert torch.equal(o.stacked()[:, 0], stacked_tensor(cache)[:, b])


def test_stack_reuses_the_previous_batch_storage_when_it_fits():
    first = stack(Model, [row(6, 0), row(6, 1), row(6, 2)], [0, 0, 0])
    second = stack(Model, [row(4, 3), row(2, 4)], [0, 2], reuse=first)
    assert second is first and second.store.rows == 2
    assert torch.equal(stacked_tensor(second)[:, 1, :, 2:], row(2, 4).stacked()[:, 0])
    wide = stack(Model, [row(200, 5)], [0], reuse=second)  # too long for it: new storage
    assert wide is not second and cache_length(wide) == 200
    other = stack(Model, [Row(row(4, 6).data.float(), 4)], [0], reuse=first)  # another dtype
    assert other is not first and other.store.data.dtype == torch.float32


def test_a_row_extended_again_from_an_older_snapshot_copies():
    """Restore an older snapshot and run the round again: the older Row is
    extended a second time. Writing in place would change the slots the
    first extension's Row (held by a newer snapshot) reads; it copies."""
    a = row(4, 0)
    cache = stack(Model, [a], [0])
    append(cache, 2, seed=1)
    a1 = split(cache, [(0, 0, 6)])[0]  # the round succeeds; a newer snapshot holds a1
    saved = a1.stacked().clone()
    cache = stack(Model, [a], [0], reuse=cache)  # the older snapshot restored, the round run again
    append(cache, 2, seed=2)
    a1b = split(cache, [(0, 0, 6)])[0]
    assert a1b.data is not a1.data and torch.equal(a1.stacked(), saved)
    assert torch.equal(a1b.stacked()[:, 0], stacked_tensor(cache)[:, 0])
    longer = stack(Model, [a1], [0])  # the newer Row is still the tip of its storage: extended in place
    append(longer, 1, seed=3)
    assert split(longer, [(0, 0, 7)])[0].data is a1.data


def test_reused_storage_gives_zero_padding_whatever_an_earlier_round_left():
    first = stack(Model, [row(40, 0), row(40, 1)], [0, 0])
    new = torch.zeros(2 * LAYERS, 2, HEADS, 4, DIM, dtype=torch.float64)
    new[:, 1, :, 0] = float("nan")  # a rejected draft's non-finite key in row 1's first appended slot
    for layer in range(LAYERS):
        first.update(new[2 * layer], new[2 * layer + 1], layer)
    second = stack(Model, [row(44, 2), row(2, 3)], [0, 42], reuse=first)  # another request, padded over it
    assert second is first
    padding = stacked_tensor(second)[:, 1, :, :42]
    assert torch.equal(padding, torch.zeros_like(padding))


def test_rows_made_in_inference_mode_are_copied_outside_it():
    """Inference tensors cannot be written in place outside inference mode
    (a step run under ``torch.inference_mode()``, the next one not): such a
    batch storage is not reused and such a Row is copied, not extended."""
    with torch.inference_mode():  # the first step: its member and batch storage are inference tensors
        a = row(4, 0)
        before = stack(Model, [a], [0])
    cache = stack(Model, [a], [0], reuse=before)  # the next step, outside inference mode
    assert cache is not before
    append(cache, 1, seed=1)
    grown = split(cache, [(0, 0, 5)])[0]
    assert grown.data is not a.data and not grown.data.is_inference()
    assert torch.equal(grown.stacked()[:, 0, :, :4], a.stacked()[:, 0])
    with torch.inference_mode():  # inside inference mode the same Row is extended in place
        inside = stack(Model, [a], [0])
        append(inside, 1, seed=2)
        assert split(inside, [(0, 0, 5)])[0].data is a.data
