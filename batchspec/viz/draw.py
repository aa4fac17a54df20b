"""Matplotlib pictures of a recorded trace: grid, positions, cache slots, a round, a violation.

Each picture colours the cells that :mod:`batchspec.viz.cells` computes from
the trace; nothing here decides what a cell is. The palette is Okabe–Ito
(safe for the common colour-vision deficiencies), rejected cells are also
hatched (the label on a plain box, so no hatch line crosses it), and every picture carries its legend. Wide rows are cut to their
last ``last`` columns (an ellipsis column says so), by default as many as fit
the docs site's column at a legible size (:data:`MIN_TEXT_PX`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from . import cells as c
from .recorded import provenance_cells

#: kind -> (face colour, text colour, hatch); Okabe–Ito colours
STYLE = {
    "pad": ("#EEEEEE", "#999999", None),
    "prompt": ("#56B4E9", "black", None),
    "committed": ("#0072B2", "white", None),
    "drafted": ("#F0E442", "black", None),
    "accepted": ("#009E73", "white", None),
    "bonus": ("#CC79A7", "black", None),
    "rejected": ("#D55E00", "white", "/"),
    "foreign": ("#E69F00", "black", "x"),
    "unknown": ("#000000", "white", None),
    "cached": ("#0072B2", "white", None),
    "fed": ("#F0E442", "black", None),
}
MARK = "#000000"
#: Every picture is drawn for the docs site's notebook column (646 px at 1280 px
#: wide): at ``DPI``, text of ``FONT_PT`` points is ``MIN_TEXT_PX`` pixels, the
#: smallest in any picture (titles are one point larger), and the site shows a
#: notebook's pictures at the size they were drawn (docs/assets/reading.css), so
#: none reads below that. ``last="fit"`` keeps as many columns as fit the column.
DPI = 100
FONT_PT = 9
MIN_TEXT_PX = FONT_PT * DPI / 72  # 12.5 px
COLUMN_IN = 6.3  # the column, less a margin, in inches at DPI
ROW_IN, TITLE_IN, TICKS_IN, LEGEND_IN, LINE_IN = 0.32, 0.34, 0.26, 0.25, 0.19
MONO_IN = 0.6 * FONT_PT / 72  # one character of the cells' monospace font
SANS_IN = 0.6 * FONT_PT / 72  # one character of the labels (an upper bound for DejaVu Sans)
FIT = "fit"


def token_text(token, alphabet: str | None) -> str:
    """How a token id is written in a cell: a byte as its character, else the id."""
    if token is None:
        return ""
    if alphabet == "bytes" and 0 <= token < 256:
        special = {32: "␣", 10: "↵", 9: "⇥"}
        if token in special:
            return special[token]
        return chr(token) if 33 <= token < 127 else f"{token:02x}"
    return str(token)


def cell_width(cells: c.Cells, alphabet=None) -> float:
    """Inches per column: room for the longest token label of ``cells``."""
    chars = max((len(token_text(t, alphabet)) for row in cells.tokens for t in row), default=1)
    return max(0.23, chars * MONO_IN + 0.08)


def _label_width(panels) -> float:
    return max((len(label) for p in panels for label in p.labels), default=0) * SANS_IN + 0.15


def columns_that_fit(cells: c.Cells, alphabet=None) -> int:
    """How many of ``cells``' last columns fit the column, beside the row labels and an ellipsis column."""
    return max(4, int((COLUMN_IN - _label_width([cells])) / cell_width(cells, alphabet)) - 1)


def _start(cells: c.Cells, alphabet, last) -> int:
    """The first column shown: all (``last=None``), the last ``last``, or as many as fit
    (``"fit"``), and never past a marked cell."""
    if last == FIT:
        last = max([columns_that_fit(cells, alphabet)] + [cells.shape[1] - j for _, j in cells.marks])
    return max(0, cells.shape[1] - last) if last else 0


def _label_box(face: str, hatch: str | None) -> dict | None:
    """A hatched cell's label sits on a box of the cell's plain colour, so the hatch
    shows above and below it but never crosses a digit (a 5-digit id fills the cell)."""
    return dict(boxstyle="square,pad=0.08", facecolor=face, edgecolor="none") if hatch else None


def draw_cells(cells: c.Cells, ax=None, alphabet=None, last: int | str | None = FIT, legend: bool = True,
               rows_at: list[float] | None = None):
    """Draw a :class:`~batchspec.viz.cells.Cells` table on ``ax`` (a new figure if None);
    ``rows_at``: where each row's top edge sits (default: row ``i`` at ``i``)."""
    if ax is None:
        return _picture([cells], alphabet, last, legend=legend, rows_at=rows_at).axes[0]
    rows, cols = cells.shape
    rows_at = rows_at or list(range(rows))
    start = _start(cells, alphabet, last)
    shift = 1 if start else 0  # the ellipsis column
    for i, y in zip(range(rows), rows_at):
        for j in range(start, cols):
            face, ink, hatch = STYLE[cells.kinds[i][j]]
            x = j - start + shift
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor="white", hatch=hatch, lw=1))
            ax.text(x + 0.5, y + 0.5, token_text(cells.tokens[i][j], alphabet), ha="center", va="center",
                    color=ink, fontsize=FONT_PT, family="DejaVu Sans Mono", bbox=_label_box(face, hatch))
        if start:
            ax.text(0.5, y + 0.5, "…", ha="center", va="center", color="#666666", fontsize=FONT_PT)
    for i, j in cells.marks:
        if j >= start:
            ax.add_patch(Rectangle((j - start + shift, rows_at[i]), 1, 1, fill=False, edgecolor=MARK, lw=2.5))
    if cells.divider is not None and cells.divider >= start:
        ax.axvline(cells.divider - start + shift, color="#222222", lw=1.5)  # grid | this round's tokens
    ax.set_xlim(0, cols - start + shift)
    ax.set_ylim(max(rows_at, default=0) + 1, 0)
    ax.set_yticks([y + 0.5 for y in rows_at], cells.labels, fontsize=FONT_PT)
    columns = cells.columns or list(range(cols))
    ticks = [j for j in range(start, cols) if (columns[j] % 5 == 0)]
    ax.set_xticks([j - start + shift + 0.5 for j in ticks], [str(columns[j]) for j in ticks], fontsize=FONT_PT)
    ax.tick_params(length=0, pad=2)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(cells.title, fontsize=FONT_PT + 1, loc="left")
    if legend and ax.figure is not None and not getattr(ax.figure, "_batchspec_picture", False):
        add_legend(ax, {k for row in cells.kinds for k in row[start:]}, marked=bool(cells.marks))
    return ax


def _handles(kinds, marked: bool) -> list[Patch]:
    handles = [Patch(facecolor=STYLE[k][0], hatch=STYLE[k][2], edgecolor="#444444", label=k)
               for k in c.KINDS if k in kinds]
    if marked:
        handles.append(Patch(fill=False, edgecolor=MARK, lw=2.5, label="breaks the invariant"))
    return handles


def add_legend(ax, kinds, marked: bool = False) -> None:
    """A legend of the cell kinds present (in the fixed order of ``KINDS``), in one line under ``ax``."""
    handles = _handles(kinds, marked)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.02), bbox_transform=ax.transAxes,
              ncol=len(handles), fontsize=FONT_PT, frameon=False, borderaxespad=1.5)


def _legend_columns(handles, width: float) -> int:
    """How many legend entries fit on one line of ``width`` inches."""
    widest = max((len(h.get_label()) for h in handles), default=1) * SANS_IN + 0.55
    return max(1, min(len(handles), int(width / widest)))


def _picture(panels: list[c.Cells], alphabet, last, caption: str | None = None, legend: bool = True,
             rows_at: list[float] | None = None):
    """One figure of ``panels`` stacked, every column the same width, the legend of
    all their kinds and then ``caption`` (wrapped to the width) underneath."""
    import textwrap

    starts = [_start(p, alphabet, last) for p in panels]
    shown = [p.shape[1] - s + (s > 0) for p, s in zip(panels, starts)]
    cell, label = max(cell_width(p, alphabet) for p in panels), _label_width(panels)
    width = label + max(shown) * cell + 0.15
    spans = [(max(rows_at) + 1 if rows_at else p.shape[0]) for p in panels]
    kinds = {k for p, s in zip(panels, starts) for row in p.kinds for k in row[s:]}
    handles = _handles(kinds, any(p.marks for p in panels)) if legend else []
    per_line = _legend_columns(handles, width - label) if handles else 1
    legend_in = LEGEND_IN * -(-len(handles) // per_line)
    lines = textwrap.wrap(caption, int((min(width, COLUMN_IN) - 0.1) / MONO_IN), break_on_hyphens=False
                          ) if caption else []
    caption_in = LINE_IN * len(lines) + (0.1 if lines else 0)
    for p in panels:  # a title wraps at the picture's width rather than widening it
        p.title = "\n".join(textwrap.wrap(p.title, int(width / (1.15 * SANS_IN)), break_on_hyphens=False))
    heights = [span * ROW_IN + TITLE_IN + LINE_IN * p.title.count("\n") + TICKS_IN for span, p in zip(spans, panels)]
    total = sum(heights) + legend_in + caption_in + 0.05
    fig = plt.figure(figsize=(width, total), dpi=DPI)
    fig._batchspec_picture = True  # draw_cells: the figure draws one legend for all panels
    top = total
    axes = []
    for panel, start, n, h in zip(panels, starts, shown, heights):
        ax = fig.add_axes([label / width, (top - h + TICKS_IN) / total, n * cell / width,
                           (h - TITLE_IN - LINE_IN * panel.title.count("\n") - TICKS_IN) / total])
        draw_cells(panel, ax, alphabet, last, rows_at=rows_at)
        axes.append(ax)
        top -= h
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(label / width, (top + 0.02) / total),
                   ncol=per_line, fontsize=FONT_PT, frameon=False, borderaxespad=0, handlelength=1.6)
    if lines:
        fig.text(0.01, 0.05 / total, "\n".join(lines), fontsize=FONT_PT, va="bottom", family="DejaVu Sans Mono")
    return fig


def draw_grid(trace, step: dict, last: int | str | None = FIT):
    """The batch grid after one step: pad / prompt / committed / drafted / accepted / rejected / bonus."""
    return _picture([c.grid_cells(trace, step)], trace.header.get("alphabet"), last)


def draw_positions(trace, step: dict, last: int | str | None = FIT):
    """For each forward call of ``step``: the position ids fed, those breaking
    I2 outlined, and below them the positions I2 expects (``cumsum(mask) - 1``
    of the mask passed with them, Spec §3.2)."""
    obs = step["observation"]
    panels = []
    for call in obs["calls"]:
        fed, expected = c.position_cells(call, obs)
        fed.title = (f"round {step['round']}, {step['step']}: positions in the {call['model']} call "
                     f"(cached slots, then the {len(call['position_ids'][0])} fed)")
        wanted = c.Cells(fed.kinds, [[e if k != "pad" or e is not None else None for e, k in zip(row, kinds)]
                                     for row, kinds in zip(expected, fed.kinds)],
                         fed.labels, "positions I2 expects: cumsum(mask) - 1", fed.columns)
        panels += [fed, wanted]
    return _picture(panels, None, last)


def draw_cache(step: dict, model: str = "target", alphabet=None, last: int | str | None = FIT, ax=None):
    """Which token each slot of ``model``'s cache holds after ``step``."""
    cells = c.cache_cells(step, model)
    if ax is None:
        return _picture([cells], alphabet, last)
    draw_cells(cells, ax, alphabet, last)
    return ax.figure


#: draw_shift: rows of room between a row's "before" line and its "after" line (for
#: the arrows), and between one row's pair of lines and the next row's
ARROW_ROOM, PAIR_GAP = 1.2, 0.6


def draw_shift(trace, before: dict, after: dict, model: str = "target", last: int | str | None = FIT):
    """Each row's cache before and after realignment, the δ_i shift as arrows (Spec §4.5).

    Every row's two lines, before and after the realignment, sit together with
    room between them, so its arrows run parallel (one shift δ_i per row) and
    never cross another row's. Arrows come from the recorded provenance: slot
    ``s`` after the realignment points back to the slot its key was copied from
    (from another row's line when a faulty realignment mixed rows up).
    """
    top, bottom = c.cache_cells(before, model), c.cache_cells(after, model)
    order = {r: i for i, r in enumerate(before["observation"]["requests"])}
    requests = after["observation"]["requests"]
    delta = dict(zip(after["decision"]["requests"], after["decision"]["delta"])) if after.get("decision") else {}
    cols = max(top.shape[1], bottom.shape[1])
    kinds, tokens, labels, rows_at = [], [], [], []
    for j, request in enumerate(requests):
        for cells, i, tag in ((top, order[request], "before"), (bottom, j, f"after, δ={delta.get(request, '?')}")):
            extra = cols - len(cells.kinds[i])
            kinds.append(cells.kinds[i] + ["pad"] * extra)
            tokens.append(cells.tokens[i] + [None] * extra)
            labels.append(f"r{request} {tag}")
        pair = j * (2 + ARROW_ROOM + PAIR_GAP)
        rows_at += [pair, pair + 1 + ARROW_ROOM]
    merged = c.Cells(kinds, tokens, labels, f"{model} cache: {before['step']} → unpad–append–repad "
                     f"(round {after['round']}); each arrow is one shifted slot", list(range(cols)))
    alphabet = trace.header.get("alphabet")
    fig = _picture([merged], alphabet, last, rows_at=rows_at)
    ax = fig.axes[0]
    left = _start(merged, alphabet, last)
    shift = 1 if left else 0
    line = {request: rows_at[2 * j] for j, request in enumerate(requests)}
    for rb, sb, ra, sa, _ in c.shift_arrows(before, after, model):
        source_request = before["observation"]["requests"][rb]
        if sb < left or sa < left or source_request not in line:
            continue
        ax.annotate("", xy=(sa - left + shift + 0.5, line[requests[ra]] + 1 + ARROW_ROOM),
                    xytext=(sb - left + shift + 0.5, line[source_request] + 1),
                    arrowprops=dict(arrowstyle="->", color="#222222", lw=0.8, shrinkA=1, shrinkB=1))
    return fig


def draw_round(trace, round: int, batch: int = 0, last: int | str | None = FIT):
    """A round as small multiples: last draft step → verify → unpad–append–repad."""
    steps = trace.round_steps(round, batch)
    picked = [s for s in steps if s["step"] == "draft"][-1:] + \
             [s for s in steps if s["step"] in ("verify", "realign")][:2]
    grids = [c.grid_cells(trace, s) for s in picked]
    names = {"draft": "1. draft", "verify": "2. verify", "realign": "3. unpad – append – repad"}
    for grid, s in zip(grids, picked):
        grid.title = f"round {round}, {names[s['step']]}"
        if s["step"] == "realign" and s["decision"]:
            grid.title += "   δ = " + ", ".join(str(d) for d in s["decision"]["delta"])
    return _picture(grids, trace.header.get("alphabet"), last)


def draw_violation(trace, violation: dict | None = None, last: int | str | None = FIT):
    """The grid of the step where ``violation`` (default: the first) happened,
    its cell outlined, the invariant and expected vs actual in the caption."""
    violation = violation or trace.first_violation()
    if violation is None:
        raise ValueError("the trace has no violation to draw")
    step = next(s for s in trace.steps if violation in s["violations"])
    cells = c.grid_cells(trace, step)
    row, column = c.violation_cell(step, violation)
    if row is not None:
        cells.marks = [(row, column)] if column is not None else [(row, j) for j in range(cells.shape[1])]
    return _picture([cells], trace.header.get("alphabet"), last, caption=c.caption(violation))


def draw_provenance(obs, ledger, model: str = "target", alphabet=None, last: int | str | None = FIT):
    """What the recorder's I6 saw of one model's cache at ``obs`` (``w.caught`` of
    :func:`batchspec.invariants.watch`): :func:`~batchspec.viz.recorded.provenance_cells`."""
    return _picture([provenance_cells(obs, ledger, model)], alphabet, last)
