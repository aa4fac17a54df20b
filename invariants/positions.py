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
    rows = obs.tokens.shape[0]
    for call in obs.calls:
        t = call.cache_length
        if call.attention_mask.shape[1] != t + call.input_ids.shape[1]:  # nothing to derive from
            out.append(report(None, t + call.input_ids.shape[1], call.attention_mask.shape[1],
                              "attention mask does not cover the cached slots and the inputs", call.model))
            continue
        counts = call.attention_mask.long().cumsum(1)[:, t:]  # [B, n]
        attended = call.attention_mask[:, t:] != 0  # [B, n]
        wrong = attended & (call.position_ids != counts - 1)  # [B, n]
        for i in wrong.any(1).nonzero().flatten().tolist():
            j = int(wrong[i].nonzero()[0])
            out.append(report(i, int(counts[i, j]) - 1, int(call.position_ids[i, j]),
                              f"position id of input {j} is not cumsum(mask) - 1", call.model))
        if obs.step == "prefill" or call.input_ids.shape[1] == 0:
            continue
        speculative = t - (obs.width - 1)
        b = min(rows, call.position_ids.shape[0])
        expected = torch.tensor(obs.length[:b], device=call.position_ids.device) - 1 + speculative  # [b]
        for i in (call.position_ids[:b, 0] != expected).nonzero().flatten().tolist():
            out.append(report(i, int(expected[i]), int(call.position_ids[i, 0]),
                              "first input does not continue the row's committed stream "
                              f"(c_i - 1 + {speculative} speculative cached slots)", call.model))
    return out
