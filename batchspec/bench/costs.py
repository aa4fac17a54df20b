"""Forward-call costs as a function of batch size and tokens per call.

Both the ``"auto"`` draft-length policy (Spec §4.2.2) and the benchmark's
ideal speedup are built on this table. Timing lives here, outside the
algorithm (style §7): the reference code only receives the numbers.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..reference import cache as kv
from ..reference.draft_policy import AUTO_MAX_K, Costs
from ..reference.state import attention_mask, content_index


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def call_seconds(model, batch: int, tokens, context: int, repeats: int = 3) -> dict[int, float]:
    """Median seconds of one forward call of ``n`` tokens per row, for each
    ``n`` in ``tokens``, at ``batch`` rows over a cache of ``context`` slots
    (random ids, no padding; one prefill serves every ``n``)."""
    vocab = model.config.vocab_size
    ids = torch.randint(2, vocab, (batch, context + max(tokens)), device=model.device)
    pad = torch.zeros(batch, dtype=torch.long, device=model.device)
    cache = kv.new_cache(model)
    kv.run_forward(model, cache, ids[:, :context], attention_mask(pad, context), content_index(pad, 0, context), 1)
    out = {}
    for n in tokens:
        mask, positions = attention_mask(pad, context + n), content_index(pad, context, context + n)
        times = []
        for _ in range(repeats + 1):  # the first call warms up
            _sync(model.device)
            start = time.perf_counter()
            kv.run_forward(model, cache, ids[:, context:context + n], mask, positions)
            _sync(model.device)
            times.append(time.perf_counter() - start)
            kv.crop_to(cache, context)
        out[n] = statistics.median(times[1:])
    return out


#: Tokens per target call that are measured; the others interpolate.
MEASURED_TOKENS = (1, 2, 3, 5, AUTO_MAX_K + 1)


def measure_costs(target, draft, batches, context: int = 64, tokens=MEASURED_TOKENS,
                  repeats: int = 2) -> Costs:
    """The :class:`~batchspec.reference.draft_policy.Costs` table: a draft
    call of one token and target calls of each count in ``tokens``, at each
    batch size in ``batches``."""
    batches = sorted(set(batches))
    return Costs(
        draft={b: call_seconds(draft, b, [1], context, repeats)[1] for b in batches},
        target={b: call_seconds(target, b, tokens, context, repeats) for b in batches},
    )
