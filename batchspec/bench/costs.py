"""Forward-call costs as a function of batch size and tokens per call.

Both the ``"auto"`` draft-length policy (Spec §4.2.2) and the benchmark's
ideal speedup are built on this table. Timing lives here, outside the
algorithm (Contributing §4.7): the reference code only receives the numbers.
"""

from __future__ import annotations

import statistics

import torch

from ..draft_lengths import LONG_CALL, prefilled, timed_call
from ..driver import clock
from ..reference.draft_costs import AUTO_MAX_K, Costs
from ..reference.model_call import run_forward
from ..reference.state import attention_mask, content_index, left_pad
from ..reference.storage import new_cache


def _interleaved(cells: list, time_cell, repeats: int) -> dict:
    """``{cell: median seconds}``: ``time_cell(cell)`` for every cell once per
    pass, passes interleaved, each cell the median of its ``repeats`` passes
    (a slow moment of a shared machine moves every cell a little rather than
    one cell a lot); ``time_cell`` warms its cell itself."""
    times: dict = {cell: [] for cell in cells}
    for _ in range(repeats):
        for cell in cells:
            times[cell].append(time_cell(cell))
    return {cell: statistics.median(t) for cell, t in times.items()}


#: Tokens per target call that are measured; the others interpolate.
MEASURED_TOKENS = (1, 2, 3, 5, AUTO_MAX_K + 1)


@torch.no_grad()
def measure_costs(target, draft, batches, context: int = 64, tokens=MEASURED_TOKENS,
                  repeats: int = 2) -> Costs:
    """The :class:`~batchspec.reference.draft_costs.Costs` table: a draft
    call of one token and target calls of each count in ``tokens``, at each
    batch size in ``batches``, over a cache of ``context`` slots.

    Every cell is timed once per pass and the passes are interleaved, so
    that a slow moment of a shared machine moves every cell a little rather
    than one cell a lot (the ideal speedup is a ratio of cells); each cell
    is the median of its ``repeats`` passes. In a pass a short cell (under
    :data:`~batchspec.draft_lengths.LONG_CALL`) runs one untimed call first,
    so that it is timed warm, as a decoder's calls of one shape follow each
    other, not right after another cell's shape (timed so, cold, the calls
    of the default pair at batch 1 were priced at 112% of a run's measured
    time), then counts the faster of the next two, against the timer's and
    the scheduler's jitter; that call also makes an untimed first pass
    needless. A long call counts its first run: a cold start is lost in it
    (Qwen2.5-Coder's target at batch 4, 1.5 s a call: the first within 3%
    of the next two); on a 1.5B target on a CPU, with an untimed call per
    cell, the table took a quarter of the benchmark's time. Each context is one
    row's fill copied to every row (:func:`~batchspec.draft_lengths.prefilled`).
    """
    batches, tokens = sorted(set(batches)), list(tokens)
    cells = [("draft", b, 1) for b in batches] + [("target", b, n) for b in batches for n in tokens]
    models = {"target": target, "draft": draft}
    prepared = {(name, b): prefilled(models[name], b, context, max(tokens)) for name, b, _ in cells}

    def warm(cell) -> float:
        name, b, n = cell
        call = (models[name], *prepared[(name, b)], n, context)
        first = timed_call(*call)
        if first >= LONG_CALL:  # long: a cold start is lost in it
            return first
        return min(timed_call(*call), timed_call(*call))  # short: warmed by the first

    median = _interleaved(cells, warm, repeats)
    return Costs(draft={b: median[("draft", b, 1)] for b in batches},
                 target={b: {n: median[("target", b, n)] for n in tokens} for b in batches})


def _prefill_call(model, prompts: list[list[int]]) -> float:
    """Seconds of one prefill: the left-padded prompts fed whole to an empty cache."""
    tokens, pad, _ = left_pad(prompts, model.device)  # [B, L]
    mask, positions = attention_mask(pad, tokens.shape[1]), content_index(pad, 0, tokens.shape[1])
    cache = new_cache(model)
    start = clock(model.device)
    run_forward(model, cache, tokens, mask, positions, 1)
    return clock(model.device) - start


@torch.no_grad()
def measure_prefill(models: dict, batches: dict[int, list[list[list[int]]]], repeats: int = 3) -> dict:
    """``{batch size: {model name: seconds}}``: the prefill of every static
    batch a run at that batch size makes, summed, for each model in
    ``models`` (``{"target": ..., "draft": ...}``).

    Prefill is a forward call every decoder makes, ``generate`` included,
    so the ideal speedup must pay it on both sides (zero bookkeeping is
    not zero prefill). Each static batch is timed once per pass, passes
    interleaved; a batch counts the median of its ``repeats`` passes. In a
    pass a short prefill (under :data:`~batchspec.draft_lengths.LONG_CALL`)
    runs once untimed first; a long one counts its first run.
    """
    cells = [(name, b, i) for b, group in sorted(batches.items()) for i in range(len(group)) for name in models]

    def warm(cell) -> float:
        first = _prefill_call(models[cell[0]], batches[cell[1]][cell[2]])
        return first if first >= LONG_CALL else _prefill_call(models[cell[0]], batches[cell[1]][cell[2]])

    median = _interleaved(cells, warm, repeats)
    out: dict = {b: {name: 0.0 for name in models} for b in batches}
    for (name, b, _), seconds in median.items():
        out[b][name] += seconds
    return out


def median_costs(tables: list[Costs]) -> Costs:
    """Cell by cell, the median of several tables of the same cells (one per
    pass of the benchmark), for the record."""
    first = tables[0]
    return Costs(draft={b: statistics.median(t.draft[b] for t in tables) for b in first.draft},
                 target={b: {n: statistics.median(t.target[b][n] for t in tables) for n in row}
                         for b, row in first.target.items()})


def median_prefill(tables: list[dict]) -> dict:
    """``{batch: {model: seconds}}``, the median over tables of :func:`measure_prefill`."""
    return {b: {name: statistics.median(t[b][name] for t in tables) for name in row} for b, row in tables[0].items()}
