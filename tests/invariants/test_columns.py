"""The checker's growing columns and causal masks (Spec §3.12.1, ``invariants.columns``, ``Memo.causal``)."""

import torch

from batchspec.invariants.columns import Columns, same_view
from batchspec.invariants.masks import causal
from batchspec.invariants.memo import Memo


def test_an_append_after_the_newest_view_writes_in_place_and_never_changes_a_view():
    cols = Columns()
    first = cols.append(torch.zeros((2, 0), dtype=torch.int64), torch.tensor([[1, 2], [3, 4]]))
    second = cols.append(first, torch.tensor([[5], [6]]))  # the newest view, whole: in place
    assert same_view(second[:, :2], first)
    assert second.tolist() == [[1, 2, 5], [3, 4, 6]]
    cropped = cols.append(second[:, :2], torch.tensor([[7], [8]]))  # a crop: a copy, the old views kept
    assert not same_view(cropped[:, :2], first)
    assert cropped.tolist() == [[1, 2, 7], [3, 4, 8]]
    assert second.tolist() == [[1, 2, 5], [3, 4, 6]] and first.tolist() == [[1, 2], [3, 4]]
    foreign = torch.tensor([[9, 9, 9], [9, 9, 9]])  # not a view of the buffer: copied, whatever its width
    assert cols.append(foreign, torch.tensor([[0], [0]])).tolist() == [[9, 9, 9, 0], [9, 9, 9, 0]]
    assert cropped.tolist() == [[1, 2, 7], [3, 4, 8]]


def test_appends_past_the_capacity_copy_and_keep_every_view():
    cols, views, row = Columns(), [], torch.zeros((1, 0), dtype=torch.int64)
    for j in range(200):
        row = cols.append(row, torch.tensor([[j]]))
        views.append(row)
    assert all(v.tolist() == [list(range(i + 1))] for i, v in enumerate(views))


def test_same_view_tells_equal_contents_in_other_memory_apart():
    a = torch.arange(6).view(2, 3)
    assert same_view(a[:, :2], a[:, :2]) and not same_view(a[:, :2], a[:, :2].clone())


def test_the_memo_slices_the_causal_mask_of_every_shape():
    memo = Memo()
    for width in (1, 5, 40, 130, 7):
        for n in range(1, width + 1):
            assert torch.equal(memo.causal(n, width, "cpu"), causal(n, width, "cpu")), (n, width)
