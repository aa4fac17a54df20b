"""Which previous row a row continues when the batch lost rows (Spec §3.12.2, History._rows)."""

import torch

from batchspec.invariants.history import History


def test_a_row_continues_the_previous_row_that_holds_its_whole_chain_not_the_first_with_its_last_slot():
    """Two previous rows hold the same content at rank 2 (a model whose attention gives
    far tokens no weight computes it from different prefixes); the row attends the
    second one's chain. The first row that matches the last slot alone is not it."""
    width = 4
    by_rank = torch.tensor([[10, 11, 99, 13, -1],   # previous row 0: 99 at rank 2, another prefix
                            [20, 21, 99, 23, -1],   # previous row 1: the chain row 0 now attends
                            [30, 31, 32, 33, -1]])  # previous row 2: finished, dropped
    held = torch.tensor([[5, 20, 21, 99],           # one pad, then ranks 0, 1, 2 of previous row 1
                         [10, 11, 99, 13]])         # previous row 0, whole
    att = torch.tensor([[False, True, True, True], [True, True, True, True]])
    at = (att.cumsum(1) - 1).clamp(0, width)
    rows, checked = History._rows(by_rank, held, att, at)
    assert not checked and rows.tolist() == [1, 0]


def test_a_row_that_no_previous_row_holds_continues_none():
    by_rank = torch.tensor([[10, 11, 99, -1], [20, 21, 99, -1], [1, 2, 3, -1]])
    held = torch.tensor([[20, 11, 99], [10, 11, 99]])  # row 0: rank 0 of one row, rank 1 of another
    att = torch.ones(2, 3, dtype=torch.bool)
    rows, checked = History._rows(by_rank, held, att, (att.cumsum(1) - 1).clamp(0, 3))
    assert rows is None and not checked
