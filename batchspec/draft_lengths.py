"""``num_draft_tokens`` as the decoders take it: one resolver for ``generate``
and ``Scheduler`` alike (Spec §4.2.2, §4.2.3).

``num_draft_tokens`` is an int ``k >= 1``; ``"auto"``, a policy choosing
``k'`` before each round from forward costs and running acceptance
(:class:`~batchspec.reference.draft_policy.AutoK`); ``"confident"``, a policy
that keeps drafting while the draft is confident
(:class:`~batchspec.reference.draft_policy.Confident`, its defaults); or a
``Confident(...)`` of the caller's own threshold and cap. The algorithm times
nothing (Contributing §4.7): the costs ``"auto"`` needs are measured here, before
decoding, by :func:`calibrate`.
"""

from __future__ import annotations

import statistics
import sys

import torch

from .driver import clock
from .reference.draft_policy import AUTO_MAX_K, AutoK, Confident, Costs
from .reference.model_call import run_forward
from .reference.moves import crop_to
from .reference.state import attention_mask, content_index
from .reference.storage import new_cache

#: Cached slots the calibration's calls attend, a typical early context.
CONTEXT = 64


def resolve_draft_policy(models, num_draft_tokens, batch_size: int):
    """The int, or a fresh policy object: :class:`AutoK` over costs just
    measured at ``batch_size`` (:func:`calibrate`), or :class:`Confident`.
    Plain decoding (``models.draft is None``) takes ``k = 0``. A policy
    object given by the caller is used as it is (its state is per run:
    pass a new one to each call)."""
    if models.draft is None:
        return 0
    if num_draft_tokens == "auto":
        return AutoK(calibrate(models.target, models.draft, batch_size))
    if num_draft_tokens == "confident":
        return Confident()
    return num_draft_tokens


def prefilled(model, batch: int, context: int, extra: int):
    """``(ids, cache)``: random ids ``[batch, context + extra]`` (no padding) and a
    cache holding the first ``context`` of them."""
    ids = torch.randint(2, model.config.vocab_size, (batch, context + extra), device=model.device)
    pad = torch.zeros(batch, dtype=torch.long, device=model.device)
    cache = new_cache(model)
    run_forward(model, cache, ids[:, :context], attention_mask(pad, context), content_index(pad, 0, context), 1)
    return ids, cache


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
def calibrate(target, draft, batch_size: int, k_max: int = AUTO_MAX_K, repeats: int = 3) -> Costs:
    """The costs ``"auto"`` prices rounds with, at ``batch_size`` only: a draft
    call of one token, target calls of 1 and ``k_max + 1`` tokens (the others
    interpolate linearly). Each shape runs once untimed, then ``repeats``
    times; its median counts: ``3 + 2 (repeats + 1)`` calls per model and
    shape set, a few seconds on a CPU for a 1.5B target. On a terminal it says
    what it is doing first."""
    if sys.stderr.isatty():
        print(f"batchspec: timing a few forward calls at batch {batch_size} for num_draft_tokens='auto'",
              file=sys.stderr)
    shapes = [("draft", 1), ("target", 1), ("target", k_max + 1)]
    models = {"target": target, "draft": draft}
    prepared = {name: prefilled(model, batch_size, CONTEXT, k_max + 1) for name, model in models.items()}
    seconds = {}
    for name, n in shapes:
        timed_call(models[name], *prepared[name], n, CONTEXT)  # warm for this shape
        seconds[(name, n)] = statistics.median(timed_call(models[name], *prepared[name], n, CONTEXT)
                                               for _ in range(repeats))
    return Costs(draft={batch_size: seconds[("draft", 1)]},
                 target={batch_size: {n: seconds[("target", n)] for name, n in shapes if name == "target"}})

