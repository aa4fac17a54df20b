"""Hand-checked ragged cases as literal token grids (Spec §4.4).

Grids are written as strings: ``.`` is a padding slot, letters are tokens.
Each case: the grid before, each row's accepted tokens this round (drafts
accepted + bonus), which rows finish, and the grid after.
"""

from __future__ import annotations

import pytest
import torch

from batchspec.reference.acceptance import Verdict
from batchspec.reference.state import BatchState, repad
from batchspec.reference.transitions import unpad_append_repad

CASES = {
    # two rows, one accepts everything, one rejects at once: the batch turns ragged
    "accept-all-vs-reject-first": (["..ab", "wxyz"], ["cdef", "Q"], [False, False],
                                   ["abcdef", ".wxyzQ"]),
    # equal acceptance: nothing moves (Spec §5.3)
    "equal-acceptance": ([".ab", "xyz"], ["cd", "QR"], [False, False], [".abcd", "xyzQR"]),
    # the longest row finishes: the grid shrinks to the narrowest width that holds the rest
    "long-row-leaves": (["abcdef", "...xyz"], ["g", "QR"], [True, False], ["xyzQR"]),
    # three rows, padding grows on one row and shrinks on another
    "three-rows": (["....ab", "..mnop", "uvwxyz"], ["cdef", "q", "AB"], [False, False, False],
                   ["..abcdef", "...mnopq", "uvwxyzAB"]),
}


def encode(grid: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = len(grid[0])
    ids = [[0 if ch == "." else ord(ch) for ch in row] for row in grid]
    pad = [len(row) - len(row.lstrip(".")) for row in grid]
    return torch.tensor(ids), torch.tensor(pad), torch.tensor([width - p for p in pad])


def decode_grid(tokens: torch.Tensor, pad: torch.Tensor) -> list[str]:
    return ["." * int(p) + "".join(chr(t) for t in row[int(p):].tolist()) for row, p in zip(tokens, pad)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_literal_grid(name):
    before, accepted, finished, after = CASES[name]
    tokens, pad, length = encode(before)
    k = max(map(len, accepted)) - 1
    proposal = torch.tensor([[ord(ch) for ch in acc.ljust(k + 1, "~")] for acc in accepted])
    a = torch.tensor([len(acc) for acc in accepted])
    verdict = Verdict(a - 1, proposal)
    state = BatchState(tokens, pad, length, list(range(len(before))), length.clone(), None, None)
    plan = repad(pad, length, a, ~torch.tensor(finished))
    unpad_append_repad(state, verdict, plan)
    assert decode_grid(state.tokens, state.pad) == after
    assert state.length.tolist() == [len(row.lstrip(".")) for row in after]
    assert state.width == max(len(row.lstrip(".")) for row in after)


def test_cases_are_well_formed():
    for name, (before, accepted, finished, after) in CASES.items():
        assert len({len(r) for r in before}) == 1 and len({len(r) for r in after}) == 1, name
        assert len(after) == finished.count(False), name
