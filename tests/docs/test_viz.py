"""The pictures draw the recorded data: the trace-to-cell mapping of
``batchspec.viz.cells`` checked cell by cell, each marking shown to appear on
a run that breaks an invariant and to stay absent on a correct one, and the
matplotlib pictures drawing one rectangle per cell.

Scenario as in tests/api_cli/test_trace.py (tiny float64 qwen3 pair, round 2 the
first ragged round). Cost: about 4 s on one core.
"""

from __future__ import annotations

import functools

import pytest
import torch

from _broken_helpers import K, N, pair
from _broken_helpers import RAGGED_AT_2 as _RAGGED, WITH_PAD_ID as _WITH_PAD_ID

RAGGED_AT_2 = tuple(map(tuple, _RAGGED))
WITH_PAD_ID = tuple(map(tuple, _WITH_PAD_ID))

from batchspec import trace, viz
from batchspec.viz import cells as c


@functools.lru_cache(maxsize=None)
def traced(method="eqspec", fault=None, prompts=WITH_PAD_ID):
    target, draft = pair("qwen3")
    return trace.record(target, draft, [list(p) for p in prompts], method, fault=fault,
                        num_draft_tokens=K, max_new_tokens=N)


@pytest.fixture(autouse=True)
def _close_figures():
    """Every picture a test draws is read, never shown: close them all after it."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def steps(recorded, name):
    return [s for s in recorded.steps if s["step"] == name]


def test_verify_grid_shows_accepted_bonus_rejected_in_order():
    recorded = traced()
    for s in steps(recorded, "verify"):
        cells, obs, d = c.grid_cells(recorded, s), s["observation"], c.decided(recorded, s)
        width, k = len(obs["tokens"][0]), d["drafted"]
        for i, request in enumerate(obs["requests"]):
            kinds, tokens, m = cells.kinds[i], cells.tokens[i], d["accepted"][i]
            assert kinds[: obs["pad"][i]] == ["pad"] * obs["pad"][i]
            assert all(kind in ("prompt", "committed") for kind in kinds[obs["pad"][i]: width])
            assert kinds[width:] == ["accepted"] * m + ["bonus" if d["bonus"][i] is not None else "pad"] + \
                ["rejected"] * (k - m)
            assert tokens[width: width + m] == obs["draft_tokens"][i][:m]
            assert tokens[width + m] == d["bonus"][i]
            if s["round"] == 1:
                assert kinds.count("prompt") == len(recorded.header["prompts"][request])


def test_align_grid_marks_the_tokens_the_round_appended():
    recorded = traced()
    for s in steps(recorded, "realign"):
        cells, obs, d = c.grid_cells(recorded, s), s["observation"], s["decision"]
        verify = recorded.find(s["round"], "verify")["observation"]
        for j, request in enumerate(obs["requests"]):
            i = d["requests"].index(request)
            new = [t for t, kind in zip(cells.tokens[j], cells.kinds[j]) if kind in ("accepted", "bonus")]
            assert new == verify["committed"][i]
            assert (cells.kinds[j][-1] == "bonus") == (d["bonus"][i] is not None)


def test_masking_holes_are_rejected_cells_and_the_violation_sits_on_the_first():
    recorded = traced("masking", prompts=RAGGED_AT_2)
    holes = 0
    for s in steps(recorded, "realign"):
        cells, obs = c.grid_cells(recorded, s), s["observation"]
        for i, row in enumerate(obs["mask"]):
            in_grid = cells.kinds[i][: len(row)]
            assert [kind == "rejected" for kind in in_grid] == \
                [held == 0 and slot >= obs["pad"][i] for slot, held in enumerate(row)]
            holes += in_grid.count("rejected")
    assert holes > 0
    first = recorded.first_violation()
    step = next(s for s in recorded.steps if first in s["violations"])
    row, column = c.violation_cell(step, first)
    assert first["invariant"] == "I1" and row == first["row"]
    assert c.grid_cells(recorded, step).kinds[row][column] == "rejected"
    assert "I1 rectangular_alignment" in c.caption(first) and "expected" in c.caption(first)


def test_position_marks_are_the_recorded_i2_violations():
    recorded = traced("masking", prompts=RAGGED_AT_2)
    marked = 0
    for s in recorded.steps:
        obs = s["observation"]
        for call in (obs or {}).get("calls", []):
            cells, expected = c.position_cells(call, obs)
            recorded_i2 = {(v["row"], v["expected"], v["actual"]) for v in s["violations"]
                           if v["invariant"] == "I2" and v["model"] == call["model"]
                           and "cumsum" in v["detail"]}
            first_marks = {}
            for i, j in cells.marks:
                first_marks.setdefault(i, j)
            t = call["cache_length"]
            assert all(j >= t for _, j in cells.marks)  # only the inputs are judged
            assert {(i, expected[i][j], call["position_ids"][i][j - t]) for i, j in first_marks.items()} == recorded_i2
            marked += len(cells.marks)
    assert marked > 0
    clean = traced()
    assert not any(c.position_cells(call, s["observation"])[0].marks
                   for s in clean.steps if s["observation"] for call in s["observation"]["calls"])


def test_cache_cells_and_shift_arrows_follow_the_provenance():
    recorded = traced()
    arrows = 0
    for s in recorded.steps:
        if s["observation"] is None:
            continue
        for model in ("target", "draft"):
            kinds = {k for row in c.cache_cells(s, model).kinds for k in row}
            assert not kinds & {"foreign", "unknown"}, (s["index"], model)
        if s["step"] == "realign":
            before = recorded.steps[s["index"] - 1]
            delta = dict(zip(s["decision"]["requests"], s["decision"]["delta"]))
            for rb, sb, ra, sa, d in c.shift_arrows(before, s):
                assert d == delta[s["observation"]["requests"][ra]] != 0
                assert before["observation"]["requests"][rb] == s["observation"]["requests"][ra]
                arrows += 1
    assert arrows > 0
    broken = traced("eqspec", "permuted_rows", RAGGED_AT_2)
    assert any("foreign" in row for s in steps(broken, "realign") for row in c.cache_cells(s).kinds)


def test_every_picture_draws_one_rectangle_per_cell():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.patches import Rectangle

    recorded = traced("masking", prompts=RAGGED_AT_2)
    verify = recorded.find(2, "verify")
    fig = viz.draw_grid(recorded, verify, last=None)
    cells = c.grid_cells(recorded, verify)
    drawn = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_fill()]
    assert len(drawn) == cells.shape[0] * cells.shape[1]
    for figure in (viz.draw_positions(recorded, verify), viz.draw_round(recorded, 2),
                   viz.draw_shift(recorded, verify, recorded.find(2, "realign")), viz.draw_violation(recorded)):
        assert figure.axes and all(ax.patches for ax in figure.axes if ax.get_title())
    with pytest.raises(ValueError, match="no violation"):
        viz.draw_violation(traced())


def test_token_text():
    from batchspec.viz.draw import token_text

    assert [token_text(t, "bytes") for t in (97, 32, 10, 0, None)] == ["a", "␣", "↵", "00", ""]
    assert token_text(1234, None) == "1234"


def test_tutorial_setup_reads_the_environment_and_says_when_it_falls_back(monkeypatch, capsys):
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", "tiny-llama")
    setup = viz.tutorial_setup()
    assert (setup.pair, setup.device, setup.fell_back) == ("tiny-llama", "cpu", False)
    assert setup.target.dtype == torch.float64 and "tiny-llama" in capsys.readouterr().out
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", "no-such-pair")
    setup = viz.tutorial_setup(fallback="tiny-llama")
    assert setup.fell_back and setup.pair == "tiny-llama" and "unknown" in setup.note
    if not torch.cuda.is_available():
        setup = viz.tutorial_setup(pair="tiny-llama", device="cuda", quiet=True)
        assert setup.device == "cpu" and "not available" in setup.note
    assert len(setup.prompts(3)) == 3


def _pictures(recorded):
    verify, realign = recorded.find(2, "verify"), recorded.find(2, "realign")
    return {"grid": viz.draw_grid(recorded, verify), "positions": viz.draw_positions(recorded, verify),
            "round": viz.draw_round(recorded, 2), "shift": viz.draw_shift(recorded, verify, realign),
            "cache": viz.draw_cache(realign), "violation": viz.draw_violation(recorded),
            "cells": viz.draw_cells(c.grid_cells(recorded, verify)).figure}


def smallest_text_px(fig) -> float:
    from matplotlib.text import Text

    return min(t.get_fontsize() * fig.dpi / 72 for t in fig.findobj(Text) if t.get_text().strip())


def test_every_picture_reads_at_actual_size():
    """Legible on the site: no text smaller than MIN_TEXT_PX (12.5 px) in the
    PNG, and by default no wider than the docs' notebook column, where the site shows
    it at the size it was drawn (tests/docs/test_browser.py checks that side)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from PIL import Image

    from batchspec.viz.draw import COLUMN_IN, DPI, MIN_TEXT_PX

    for name, fig in _pictures(traced("masking", prompts=RAGGED_AT_2)).items():
        assert fig.dpi == DPI and smallest_text_px(fig) >= MIN_TEXT_PX - 1e-9, (name, smallest_text_px(fig))
        png = io.BytesIO()
        fig.savefig(png, format="png", bbox_inches="tight")  # as the notebook's inline backend saves it
        width = Image.open(png).size[0]
        assert width <= (COLUMN_IN + 0.3) * DPI, (name, width)
    small = _pictures(traced("masking", prompts=RAGGED_AT_2))["grid"]
    next(t for t in small.axes[0].texts if t.get_text().strip()).set_fontsize(7)
    assert smallest_text_px(small) < MIN_TEXT_PX  # the check fires on a picture with smaller text


def test_the_realignment_arrows_stay_in_their_row():
    """Tutorial 5's picture: each row's arrows run from its "before" line to its "after"
    line, with room between the lines, so no two rows' arrows cross."""
    import matplotlib

    matplotlib.use("Agg")
    recorded = traced()
    realign = next(s for s in steps(recorded, "realign") if any(s["decision"]["delta"]))
    fig = viz.draw_shift(recorded, recorded.steps[realign["index"] - 1], realign, last=None)
    ax = fig.axes[0]
    lines = [tick.get_position()[1] for tick in ax.get_yticklabels()]  # row centres, before/after per row
    arrows = [(a.xyann[1], a.xy[1]) for a in ax.texts if hasattr(a, "xyann")]
    assert arrows
    bands = [(lines[2 * j] + 0.5, lines[2 * j + 1] - 0.5) for j in range(len(lines) // 2)]
    for start, end in arrows:
        assert any(top == start and end == bottom and bottom - top >= 1 for top, bottom in bands), (start, end)


def test_no_hatch_line_crosses_a_label():
    """A hatched cell's label (a rejected 5-digit id fills its cell) sits on a box of
    the cell's plain colour; unhatched cells' labels need none."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle

    recorded = traced("masking", prompts=RAGGED_AT_2)
    ax = viz.draw_grid(recorded, recorded.find(2, "verify"), last=None).axes[0]
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()]
    labels = [t for t in ax.texts if t.get_text().strip()]
    hatched = 0
    for cell in cells:
        x, y = cell.get_x() + 0.5, cell.get_y() + 0.5
        label = next((t for t in labels if t.get_position() == (x, y)), None)
        if label is None:
            continue
        box = label.get_bbox_patch()
        if cell.get_hatch():
            hatched += 1
            assert box is not None and box.get_facecolor() == to_rgba(cell.get_facecolor()), label.get_text()
        else:
            assert box is None
    assert hatched  # the masking run rejects tokens: the check saw hatched labels
