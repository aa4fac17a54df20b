"""I2 position continuity (Spec §3.2)."""

from __future__ import annotations

import torch

from ._util import reporter
from .observation import Observation
from .violation import Violation


def position_continuity(obs: Observation) -> list[Violation]:
    """Checked on the tensors really passed to each forward call, for both
    models (Spec §3.2):

    * every attended input token's position id is ``cumsum(mask) - 1`` of the
      attention mask passed with it: content token ``j`` sits at position
      ``j`` whatever the padding;
    * after prefill, a row's first input of a call continues its committed
      stream: position ``c_i - 1`` plus the speculative slots already cached.
    """
    report = reporter(obs, "I2", "position_continuity")
    out: list[Violation] = []
    for call in obs.calls:
        t, n = call.cache_length, call.input_ids.shape[1]
        if call.attention_mask.shape[1] != t + n:  # nothing to derive from
            out.append(report(None, t + n, call.attention_mask.shape[1],
                              "attention mask does not cover the cached slots and the inputs", call.model))
            continue
        fed, expected = call.content_positions()  # [B, n]: attended inputs, cumsum(mask) - 1
        if not torch.equal(torch.where(fed, expected, call.position_ids), call.position_ids):
            out.extend(_misplaced(call, fed, expected, report))  # computed only for a violation
        if obs.step != "prefill" and n:
            out.extend(_discontinued(obs, call, report))
    return out


def _misplaced(call, fed, expected, report) -> list[Violation]:
    """Each row's first attended input whose position id is not ``cumsum(mask) - 1``."""
    out = []
    wrong = fed & (call.position_ids != expected)  # [B, n]
    for i in wrong.any(1).nonzero().flatten().tolist():
        j = int(wrong[i].nonzero()[0])
        out.append(report(i, int(expected[i, j]), int(call.position_ids[i, j]),
                          f"position id of input {j} is not cumsum(mask) - 1", call.model))
    return out


def _discontinued(obs, call, report) -> list[Violation]:
    """Rows whose first input is not at ``c_i - 1`` plus the speculative slots cached."""
    speculative = call.cache_length - (obs.width - 1)
    b = min(obs.tokens.shape[0], call.position_ids.shape[0])
    ids = call.position_ids if call.position_ids.shape[0] == b else call.position_ids[:b]
    first = ids[:, 0].tolist()  # [b]: one small transfer
    out = []
    for i, (c, got) in enumerate(zip(obs.length[:b], first)):
        if got != c - 1 + speculative:
            out.append(report(i, c - 1 + speculative, got, "first input does not continue the row's committed "
                              f"stream (c_i - 1 + {speculative} speculative cached slots)", call.model))
    return out
