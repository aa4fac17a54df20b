"""The draft policy a run decodes with, started at the API edge (Spec §4.2,
§4.2.2, §4.2.3), and the forward-cost calibration ``Auto`` prices rounds with.

``generate``, ``Scheduler`` and the CLI convert ``num_draft_tokens`` once
with :func:`~batchspec.reference.draft_policy.as_policy`; :func:`start`
gives the run its copy. The algorithm times nothing: the costs ``Auto``
needs are measured here, before decoding, by :func:`calibrate`, once per
(target, draft, batch size, dtype, device, threads) for each ``Auto``
object (its memo; for the name ``"auto"``, the target model's, :func:`by_name`),
and reported to ``on_calibrate``.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from .driver import clock
from .reference.draft_costs import AUTO_MAX_K, Costs
from .reference.draft_policy import DraftPolicy, Fixed
from .reference.model_call import run_forward
from .reference.moves import crop_to, take_slots
from .reference.state import attention_mask, content_index
from .reference.storage import new_cache

#: Cached slots the calibration's calls attend, a typical early context.
CONTEXT = 64

#: Seconds from which a timed call is long enough that its first run counts: a cold start
#: (allocations, a new shape) is lost in it, and a second run would only double the time.
LONG_CALL = 0.1


#: The attribute of a target model that holds the calibrations of ``"auto"`` given by name.
MEMO_ATTRIBUTE = "batchspec_calibrations"


def by_name(value, policy: DraftPolicy, target) -> DraftPolicy:
    """``policy``, converted from ``value``; when ``value`` is a name (``"auto"``),
    its calibrations are kept on the ``target`` model, in the attribute
    ``batchspec_calibrations`` (Spec §4.2.2): every ``generate`` call with the
    same models, batch size, dtype, device and threads then calibrates once per
    process, not once per call. A policy object keeps its own memo, as before.
    Delete the attribute (``del target.batchspec_calibrations``) to measure again."""
    if not isinstance(value, str) or not hasattr(policy, "calibrations"):
        return policy
    memo = getattr(target, MEMO_ATTRIBUTE, None)
    if not isinstance(memo, dict):
        memo = {}
        setattr(target, MEMO_ATTRIBUTE, memo)
    policy.calibrations = memo
    return policy


def start(models, policy: DraftPolicy, batch_size: int, on_calibrate: Callable | None = None,
          budget: int | None = None, width: int = 0) -> DraftPolicy:
    """The copy of ``policy`` one run decodes with (``Fixed(0)``, plain
    decoding, when ``models.draft is None``). ``Auto`` calibrates here, on
    first use of a shape, and decides whether to draft at all for rows of
    ``budget`` tokens after prompts padded to ``width`` (Spec §4.2.2);
    ``on_calibrate(report)`` hears what was measured (``report``: batch
    size, seconds per call shape and per draft prefill position, seconds spent)."""
    if models.draft is None:
        return Fixed(0)

    def measure(target, draft, batch, k_max):
        began = time.perf_counter()
        costs = calibrate(target, draft, batch, k_max)
        if on_calibrate is not None:
            on_calibrate({"batch_size": batch, "draft_call": costs.draft[batch], "target_calls": costs.target[batch],
                          "draft_prefill_per_position": costs.draft_prefill[batch],
                          "seconds": time.perf_counter() - began})
        return costs

    return policy.start(models, batch_size, measure, budget, width)


def prefilled(model, batch: int, context: int, extra: int, replicate: bool = True):
    """``(ids, cache)``: random ids ``[batch, context + extra]`` (no padding) and a
    cache of ``context`` slots per row, for timing calls after it. With
    ``replicate`` the first row's ids are fed and its slots copied to every
    row (a call's cost does not depend on what the slots hold; Qwen2.5-Coder's
    1.5B target on one CPU thread filled 4 rows of 64 slots in 5.3–5.5 s,
    one row and its copies in 1.9–2.1 s); without it, every row is fed (a
    prefill timed)."""
    ids = torch.randint(2, model.config.vocab_size, (batch, context + extra), device=model.device)
    rows = 1 if replicate else batch
    pad = torch.zeros(rows, dtype=torch.long, device=model.device)
    cache = new_cache(model)
    run_forward(model, cache, ids[:rows, :context], attention_mask(pad, context), content_index(pad, 0, context), 1)
    if rows < batch:
        take_slots(cache, torch.zeros(batch, dtype=torch.long, device=model.device),
                   torch.arange(context, device=model.device).expand(batch, context))
    return ids, cache


def timed_fill(model, batch: int) -> float:
    """Seconds of a prefill of ``batch`` rows of ``CONTEXT`` tokens."""
    start = clock(model.device)
    prefilled(model, batch, CONTEXT, 0, replicate=False)
    return clock(model.device) - start


def timed_call(model, ids, cache, n: int, context: int) -> float:
    """Seconds of one forward call of ``n`` tokens per row after ``context``
    cached slots; the cache is cropped back after it."""
    pad = torch.zeros(ids.shape[0], dtype=torch.long, device=model.device)
    mask, positions = attention_mask(pad, context + n), content_index(pad, context, context + n)
    start = clock(model.device)
    run_forward(model, cache, ids[:, context:context + n], mask, positions)
    seconds = clock(model.device) - start
    crop_to(cache, context)
    return seconds


@torch.no_grad()
def calibrate(target, draft, batch_size: int, k_max: int = AUTO_MAX_K, repeats: int = 2) -> Costs:
    """The costs ``"auto"`` prices rounds with, at ``batch_size`` only: a draft
    call of one token, target calls of 1, 2 and ``k_max + 1`` tokens (the
    others interpolate linearly between them; a CPU's cost often jumps from
    one token per row to two, and one line from 1 to ``k_max + 1`` would hide
    it), and the draft's prefill per prompt position. Each call shape runs
    ``repeats`` times and its median counts; a short shape (under
    :data:`LONG_CALL`) runs once more first, untimed. The contexts are one
    row's fill copied to every row (:func:`prefilled`); the draft's prefill
    is timed over every row. On Qwen2.5-Coder (1.5B/0.5B), one thread:
    15, 12 and 15 s at batch 1, 4 and 8 (the first includes the draft's
    first call ever); 12, 23 and 35 s when every row was filled."""
    shapes = [("draft", 1)] + [("target", n) for n in sorted({1, min(2, k_max + 1), k_max + 1})]
    models = {"target": target, "draft": draft}
    prepared = {name: prefilled(model, batch_size, CONTEXT, k_max + 1) for name, model in models.items()}
    seconds = {}
    for name, n in shapes:
        first = timed_call(models[name], *prepared[name], n, CONTEXT)  # warms the shape; counts if long
        runs = [first] if first >= LONG_CALL else []
        runs += [timed_call(models[name], *prepared[name], n, CONTEXT) for _ in range(repeats - len(runs))]
        seconds[(name, n)] = statistics.median(runs)
    fill = timed_fill(draft, batch_size)
    if fill < LONG_CALL:  # short: that one warmed the shape; time it again
        fill = timed_fill(draft, batch_size)
    return Costs(draft={batch_size: seconds[("draft", 1)]},
                 target={batch_size: {n: seconds[("target", n)] for name, n in shapes if name == "target"}},
                 draft_prefill={batch_size: fill / CONTEXT})
