"""The hole-aware invariant set (Spec §3.10, §7.1): a valid holes-plus-cumsum
decoder is silent under it (and flagged by I1 under the default set), and
masking whose positions count slots is still caught."""

from __future__ import annotations


import pytest
import torch

from batchspec.examples import outside_decoder as outside
from _broken_helpers import K, N, RAGGED_AT_2, pair, reference

from batchspec.invariants import HOLE_AWARE, INVARIANTS, InvariantViolation, Observation, watch
from batchspec.invariants.holes import hole_alignment


def run_holes(registry, slots=False, check="raise"):
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft, registry=registry, check=check) as w:
        out = outside.decode_holes(target, draft, RAGGED_AT_2, K, N, on_boundary=w.boundary, slots=slots)
    return out, w


def test_holes_with_cumsum_positions_are_exact_and_silent_under_the_hole_aware_set():
    out, w = run_holes(HOLE_AWARE)
    assert out == reference("qwen3", RAGGED_AT_2)
    assert w.violations == [] and w.round > 3
    mask = w.grid[1]
    assert bool((mask[:, 1:] < mask[:, :-1]).any())  # a live slot followed by a hole: holes really occur


def test_the_default_set_flags_the_same_decoder_with_I1():
    _, w = run_holes(INVARIANTS, check="record")
    assert {v.invariant for v in w.violations} == {"I1"}
    assert w.violations[0].round == 2  # the first boundary after a round with a rejection (round 2 is ragged)


def test_positions_counting_slots_are_still_caught():
    _, w = run_holes(HOLE_AWARE, slots=True, check="record")
    layout = [v for v in w.violations if v.invariant.startswith("I")]
    assert (layout[0].invariant, layout[0].round) == ("I2", 3)  # the first call after the first hole
    # the correctness level (Spec §3.12) sees it first: at the first call fed positions that count slots
    assert w.violations[0].invariant == "C1" and "position" in w.violations[0].detail


def grid(mask_rows, length=None):
    mask = torch.tensor(mask_rows)
    c = length or mask.sum(1).tolist()
    return Observation(1, "realign", torch.ones_like(mask), mask, [mask.shape[1] - x for x in c], c, {})


def test_I1_hole_alignment_fires_and_is_silent():
    assert hole_alignment(grid([[0, 1, 0, 1], [1, 1, 1, 1]])) == []
    (v,) = hole_alignment(grid([[0, 1, 1, 0], [1, 1, 1, 1]]))
    assert (v.invariant, v.row) == ("I1°", 0) and "last grid slot" in v.detail
    (v,) = hole_alignment(grid([[0, 1, 0, 1], [1, 1, 1, 1]], length=[3, 4]))
    assert (v.row, v.actual) == (0, {"c_i": 3, "p_i": 1})
    (v,) = hole_alignment(grid([[0, 2, 0, 1], [1, 1, 1, 1]]))
    assert "not 0/1" in v.detail
