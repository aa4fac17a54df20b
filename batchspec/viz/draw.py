"""Matplotlib pictures of a recorded trace: grid, positions, cache slots, a round, a violation.

Each picture colours the cells that :mod:`batchspec.viz.cells` computes from
the trace; nothing here decides what a cell is. The palette is Okabe–Ito
(safe for the common colour-vision deficiencies), rejected cells are also
hatched, and every picture carries its legend. Wide rows are cut to their
last ``last`` columns (an ellipsis column says so) to stay readable and fast.
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


def _figure(rows: int, cols: int, panels: int = 1):
    fig, axes = plt.subplots(panels, 1, figsize=(min(max(6.5, 2.6 + 0.3 * cols), 14), (0.34 * rows + 0.9) * panels),
                             squeeze=False, dpi=90)
    return fig, [a[0] for a in axes]


def draw_cells(cells: c.Cells, ax=None, alphabet=None, last: int | None = 28, legend: bool = True):
    """Draw a :class:`~batchspec.viz.cells.Cells` table on ``ax`` (a new figure if None)."""
    rows, cols = cells.shape
    start = max(0, cols - last) if last else 0
    if ax is None:
        _, (ax,) = _figure(rows, cols - start + (start > 0))
    shift = 1 if start else 0  # the ellipsis column
    for i in range(rows):
        for j in range(start, cols):
            face, ink, hatch = STYLE[cells.kinds[i][j]]
            x = j - start + shift
            ax.add_patch(Rectangle((x, i), 1, 1, facecolor=face, edgecolor="white", hatch=hatch, lw=1))
            ax.text(x + 0.5, i + 0.5, token_text(cells.tokens[i][j], alphabet), ha="center", va="center",
                    color=ink, fontsize=8, family="DejaVu Sans Mono")
        if start:
            ax.text(0.5, i + 0.5, "…", ha="center", va="center", color="#666666")
    for i, j in cells.marks:
        if j >= start:
            ax.add_patch(Rectangle((j - start + shift, i), 1, 1, fill=False, edgecolor=MARK, lw=2.5))
    if cells.divider is not None and cells.divider >= start:
        ax.axvline(cells.divider - start + shift, color="#222222", lw=1.5)  # grid | this round's tokens
    ax.set_xlim(0, cols - start + shift)
    ax.set_ylim(rows, 0)
    ax.set_yticks([i + 0.5 for i in range(rows)], cells.labels, fontsize=8)
    columns = cells.columns or list(range(cols))
    ticks = [j for j in range(start, cols) if (columns[j] % 5 == 0)]
    ax.set_xticks([j - start + shift + 0.5 for j in ticks], [str(columns[j]) for j in ticks], fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(cells.title, fontsize=9, loc="left")
    if legend:
        add_legend(ax, {k for row in cells.kinds for k in row[start:]}, marked=bool(cells.marks))
    return ax


def add_legend(ax, kinds, marked: bool = False) -> None:
    """A legend of the cell kinds present (in the fixed order of ``KINDS``)."""
    handles = [Patch(facecolor=STYLE[k][0], hatch=STYLE[k][2], edgecolor="#444444", label=k)
               for k in c.KINDS if k in kinds]
    if marked:
        handles.append(Patch(fill=False, edgecolor=MARK, lw=2.5, label="breaks the invariant"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)


def _done(fig):
    fig.tight_layout()
    return fig


def draw_grid(trace, step: dict, last: int | None = 28):
    """The batch grid after one step: pad / prompt / committed / drafted / accepted / rejected / bonus."""
    cells = c.grid_cells(trace, step)
    fig, (ax,) = _figure(cells.shape[0], min(cells.shape[1], (last or 999) + 1))
    draw_cells(cells, ax, trace.header.get("alphabet"), last)
    return _done(fig)


def draw_positions(trace, step: dict, last: int | None = 28):
    """For each forward call of ``step``: the position ids fed, those breaking
    I2 outlined, and below them the positions I2 expects (``cumsum(mask) - 1``
    of the mask passed with them, Spec §3.2)."""
    obs = step["observation"]
    calls = obs["calls"]
    width = max(len(call["attention_mask"][0]) for call in calls)
    fig, axes = _figure(len(obs["requests"]), min(width, (last or 999) + 1), 2 * len(calls))
    for n, call in enumerate(calls):
        fed, expected = c.position_cells(call, obs)
        fed.title = (f"round {step['round']}, {step['step']}: positions in the {call['model']} call "
                     f"(cached slots, then the {len(call['position_ids'][0])} fed)")
        wanted = c.Cells(fed.kinds, [[e if k != "pad" or e is not None else None for e, k in zip(row, kinds)]
                                     for row, kinds in zip(expected, fed.kinds)],
                         fed.labels, "positions I2 expects: cumsum(mask) - 1", fed.columns)
        draw_cells(fed, axes[2 * n], None, last)
        draw_cells(wanted, axes[2 * n + 1], None, last)
    return _done(fig)


def draw_cache(step: dict, model: str = "target", alphabet=None, last: int | None = 28, ax=None):
    """Which token each slot of ``model``'s cache holds after ``step``."""
    cells = c.cache_cells(step, model)
    if ax is None:
        fig, (ax,) = _figure(cells.shape[0], min(cells.shape[1], (last or 999) + 1))
    draw_cells(cells, ax, alphabet, last)
    return ax.figure


def draw_shift(trace, before: dict, after: dict, model: str = "target", last: int = 24):
    """Each row's cache before and after realignment, the δ_i shift as arrows (Spec §4.5).

    Line ``2j`` is row ``j``'s request before the gather, line ``2j + 1`` after
    it. Arrows come from the recorded provenance: slot ``s`` after the gather
    points back to the slot its key was copied from (from another row's line
    when a gather mixed rows up).
    """
    top, bottom = c.cache_cells(before, model), c.cache_cells(after, model)
    order = {r: i for i, r in enumerate(before["observation"]["requests"])}
    requests = after["observation"]["requests"]
    delta = dict(zip(after["decision"]["requests"], after["decision"]["delta"])) if after.get("decision") else {}
    cols = max(top.shape[1], bottom.shape[1])
    kinds, tokens, labels = [], [], []
    for j, request in enumerate(requests):
        for cells, i, tag in ((top, order[request], "before"), (bottom, j, f"after, δ={delta.get(request, '?')}")):
            extra = cols - len(cells.kinds[i])
            kinds.append(cells.kinds[i] + ["pad"] * extra)
            tokens.append(cells.tokens[i] + [None] * extra)
            labels.append(f"r{request} {tag}")
    merged = c.Cells(kinds, tokens, labels, f"{model} cache: {before['step']} → unpad–append–repad "
                     f"(round {after['round']}); each arrow is one gathered slot", list(range(cols)))
    fig, (ax,) = _figure(len(kinds), min(cols, last) + 1)
    draw_cells(merged, ax, trace.header.get("alphabet"), last)
    left, shift = max(0, cols - last), 1 if cols > last else 0
    line = {request: 2 * j for j, request in enumerate(requests)}
    for rb, sb, ra, sa, _ in c.shift_arrows(before, after, model):
        source_request = before["observation"]["requests"][rb]
        if sb < left or sa < left or source_request not in line:
            continue
        ax.annotate("", xy=(sa - left + shift + 0.5, line[requests[ra]] + 1.1),
                    xytext=(sb - left + shift + 0.5, line[source_request] + 0.9),
                    arrowprops=dict(arrowstyle="->", color="#222222", lw=0.7, shrinkA=0, shrinkB=0))
    return _done(fig)


def draw_round(trace, round: int, batch: int = 0, last: int = 20):
    """A round as small multiples: last draft step → verify → unpad–append–repad."""
    steps = trace.round_steps(round, batch)
    picked = [s for s in steps if s["step"] == "draft"][-1:] + \
             [s for s in steps if s["step"] in ("verify", "align")][:2]
    grids = [c.grid_cells(trace, s) for s in picked]
    names = {"draft": "1. draft", "verify": "2. verify", "align": "3. unpad – append – repad"}
    rows = max(g.shape[0] for g in grids)
    fig, axes = _figure(rows, min(max(g.shape[1] for g in grids), last + 1), len(grids))
    for ax, grid, s in zip(axes, grids, picked):
        grid.title = f"round {round}, {names[s['step']]}"
        if s["step"] == "align" and s["decision"]:
            grid.title += "   δ = " + ", ".join(str(d) for d in s["decision"]["delta"])
        draw_cells(grid, ax, trace.header.get("alphabet"), last)
    return _done(fig)


def draw_violation(trace, violation: dict | None = None, last: int = 24):
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
    fig, (ax,) = _figure(cells.shape[0], min(cells.shape[1], last + 1))
    height = fig.get_figheight() + 0.6  # room for the two caption lines
    fig.set_figheight(height)
    draw_cells(cells, ax, trace.header.get("alphabet"), last)
    fig.text(0.01, 0.05 / height, c.caption(violation), fontsize=8, va="bottom", family="DejaVu Sans Mono")
    fig.tight_layout(rect=(0, 0.6 / height, 1, 1))
    return fig


def draw_provenance(obs, ledger, model: str = "target", alphabet=None, last: int | None = 28):
    """What the recorder's I6 saw of one model's cache at ``obs`` (``w.caught`` of
    :func:`batchspec.invariants.watch`): :func:`~batchspec.viz.recorded.provenance_cells`."""
    cells = provenance_cells(obs, ledger, model)
    fig, (ax,) = _figure(cells.shape[0], min(cells.shape[1], (last or 999) + 1))
    draw_cells(cells, ax, alphabet, last)
    return _done(fig)
