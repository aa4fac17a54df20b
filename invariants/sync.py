"""I4 draft/target synchronisation (Spec §3.4)."""

from __future__ import annotations

import torch

from ._util import reporter
from .observation import Observation
from .violation import Violation


def draft_target_sync(obs: Observation) -> list[Violation]:
    """Both models describe the same committed stream for every row (Spec §3.4):

    * at a round boundary both caches hold the same number of slots;
    * every call attends exactly the grid's committed slots (its mask over
      slots ``0 .. L-2`` equals the grid mask) and all slots after them;
    * a call that starts a round (cache of ``L - 1`` slots) leads with the
      row's newest committed token; a later draft call feeds the previous
      draft; the target's verify call feeds exactly the drafts proposed.
    """
    report = reporter(obs, "I4", "draft_target_sync")
    out: list[Violation] = []
    need = obs.width - 1
    lengths = {m: v.length for m, v in obs.caches.items()}
    if obs.boundary and len(set(lengths.values())) > 1:
        out.append(report(None, "equal cache lengths", lengths, "the two caches describe different streams"))
    newest = obs.tokens[:, -1]  # [B]
    drafts = obs.draft_tokens
    for call in obs.calls:
        if obs.step == "prefill" or call.input_ids.shape[1] == 0:
            continue
        t = call.cache_length
        mask = call.attention_mask
        covers = mask.shape[1] == t + call.input_ids.shape[1] and mask.shape[1] >= need  # else I2 reports it
        committed_ok = ((mask[:, :need] == obs.mask[:, :need]).all(1) & (mask[:, need:] != 0).all(1)
                        if covers else mask.new_ones(mask.shape[0], dtype=torch.bool))  # [B]
        for i in (~committed_ok).nonzero().flatten().tolist():
            out.append(report(i, obs.mask[i, :need].tolist() + ["1..."], mask[i].tolist(),
                              "call does not attend exactly the committed slots", call.model))
        first = call.input_ids[:, 0]
        if t == need:
            expected, what = newest, "the newest committed token"
        elif drafts is not None and call.model == "draft" and 0 < t - need <= drafts.shape[1]:
            expected, what = drafts[:, t - need - 1], f"draft {t - need}"
        else:
            out.append(report(None, f"{need} cached slots (+ drafts for a draft call)", t,
                              "call does not continue the committed stream", call.model))
            continue
        for i in (first != expected).nonzero().flatten().tolist():
            out.append(report(i, int(expected[i]), int(first[i]), f"first input is not {what}", call.model))
        if call.model == "target" and drafts is not None and call.input_ids.shape[1] > 1:
            fed = call.input_ids[:, 1:]
            if fed.shape != drafts.shape:
                out.append(report(None, tuple(drafts.shape), tuple(fed.shape), "verify input is not the drafts", call.model))
                continue
            for i in (fed != drafts).any(1).nonzero().flatten().tolist():
                out.append(report(i, drafts[i].tolist(), fed[i].tolist(),
                                  "target verified tokens the draft did not propose", call.model))
    return out
