"""I2 position continuity (Spec §3.2)."""

from __future__ import annotations

import torch

from ._util import reporter, same, where_wrong
from .memo import Memo
from .observation import Observation
from .violation import Violation


def position_continuity(obs: Observation, memo: Memo | None = None) -> list[Violation]:
    """Checked on the tensors really passed to each forward call, for both
    models (Spec §3.2):

    * every attended input token's position id is ``cumsum(mask) - 1`` of the
      attention mask passed with it: content token ``j`` sits at position
      ``j`` whatever the padding;
    * a call whose first input is a content slot of the row (a cache of
      ``T >= p_i`` slots) continues the row's committed stream: its first
      input at position ``T - p_i``, i.e. ``c_i - 1`` plus the speculative
      slots already cached (``T - (L - 1)``; -1 for a draft cache that lags
      one slot, Spec §4.2.1). A call whose first input is a padding slot (a
      prefill, a prefill that fed nothing, Spec §4.1) feeds committed slots
      after it, whose positions the mask derives and I4 pins to the grid mask.
    """
    report = reporter(obs, "I2", "position_continuity")
    memo = memo or Memo()
    out: list[Violation] = []
    for call in obs.calls:
        t, n = call.cache_length, call.input_ids.shape[1]
        if call.attention_mask.shape[1] != t + n:  # nothing to derive from
            out.append(report(None, t + n, call.attention_mask.shape[1],
                              "attention mask does not cover the cached slots and the inputs", call.model))
            continue
        # the statement: every attended input at cumsum(mask) - 1 ...
        fed, derived = memo.content_positions(call)  # [B, n]
        placed = torch.where(fed, derived, call.position_ids)  # the positions fed, derived where attended
        if not same(call.position_ids, placed):
            out.extend(_misplaced(call, placed, report))
        b = min(obs.tokens.shape[0], call.position_ids.shape[0])
        rows = [i for i in range(b) if t >= obs.pad[i]] if n else []  # first input a content slot
        if not rows:  # a call that feeds padding first: its committed slots' positions are derived above
            continue
        # ... and a first input on a content slot at c_i - 1 plus the speculative slots cached
        speculative = t - (obs.width - 1)
        first = call.position_ids[:b, 0].tolist()  # [b]: one small transfer
        continued = [c - 1 + speculative for c in obs.length[:b]]
        if any(first[i] != continued[i] for i in rows):
            out.extend(_discontinued(call, first, continued, speculative, rows, report))
    return out


def _misplaced(call, placed, report) -> list[Violation]:
    """Each row's first attended input whose position id is not ``cumsum(mask) - 1``."""
    return [report(i, int(placed[i, j]), int(call.position_ids[i, j]),
                   f"position id of input {j} is not cumsum(mask) - 1", call.model)
            for i, j in where_wrong(call.position_ids != placed)]


def _discontinued(call, first, continued, speculative, rows, report) -> list[Violation]:
    """Rows whose first input is not at ``c_i - 1`` plus the speculative slots cached."""
    return [report(i, continued[i], first[i], "first input does not continue the row's committed "
                   f"stream (c_i - 1 + {speculative} speculative cached slots)", call.model)
            for i in rows if first[i] != continued[i]]
