"""I4 draft/target synchronisation (Spec §3.4)."""

from __future__ import annotations

import torch

from ._util import extended_mask, on, reporter
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
    lengths = {m: v.length for m, v in obs.caches.items()}
    if obs.boundary and len(set(lengths.values())) > 1:
        out.append(report(None, "equal cache lengths", lengths, "the two caches describe different streams"))
    for call in obs.calls:
        if obs.step == "prefill" or call.input_ids.shape[1] == 0:
            continue
        expected = _first_input(obs, call)
        if not _in_step(obs, call, expected):  # the explanation is computed only for a violation
            out.extend(_explain(obs, call, expected, report))
    return out


def _first_input(obs, call):
    """``(tokens [B], what)`` the call must lead with, or None when its cache length
    is neither ``L - 1`` (it starts a round) nor that plus some drafts (a later draft call)."""
    need, t, drafts = obs.width - 1, call.cache_length, obs.draft_tokens
    device = call.input_ids.device  # the grid and the drafts may live on another device than the call
    if t == need:
        return on(obs.tokens[:, -1], device), "the newest committed token"
    if drafts is not None and call.model == "draft" and 0 < t - need <= drafts.shape[1]:
        return on(drafts[:, t - need - 1], device), f"draft {t - need}"
    return None


def _on(drafts, call):
    """``drafts`` on ``call``'s device (None stays None)."""
    return None if drafts is None else on(drafts, call.input_ids.device)


def _covers(obs, call) -> bool:
    mask = call.attention_mask
    return mask.shape[1] == call.cache_length + call.input_ids.shape[1] and mask.shape[1] >= obs.width - 1


def _in_step(obs, call, expected) -> bool:
    """The whole of :func:`draft_target_sync` for one call, as one answer: a few
    whole-tensor comparisons (the common case, where nothing is wrong)."""
    need, mask, drafts = obs.width - 1, call.attention_mask, _on(obs.draft_tokens, call)
    if _covers(obs, call) and not (mask.shape[0] == obs.mask.shape[0] and obs.mask.shape[1] >= need and torch.equal(
            mask, extended_mask(obs.mask, need, mask.shape[1], mask.device, mask.dtype))):
        return False
    if expected is None or not torch.equal(call.input_ids[:, 0], expected[0]):
        return False
    verifies = call.model == "target" and drafts is not None and call.input_ids.shape[1] > 1
    return not verifies or torch.equal(call.input_ids[:, 1:], drafts)


def _explain(obs, call, expected, report) -> list[Violation]:
    """Every row where ``call`` breaks :func:`draft_target_sync`."""
    out: list[Violation] = []
    need, mask, drafts = obs.width - 1, call.attention_mask, _on(obs.draft_tokens, call)
    if _covers(obs, call) and obs.mask.shape[1] < need:  # (a call that does not cover: I2 reports it)
        out.append(report(None, f"a grid mask over the {need} committed slots", obs.mask.shape[1],
                          "the grid mask does not cover the committed slots the call attends", call.model))
    elif _covers(obs, call):
        grid = on(obs.mask[:, :need], mask.device)
        committed_ok = (mask[:, :need] == grid).all(1) & (mask[:, need:] != 0).all(1)  # [B]
        for i in (~committed_ok).nonzero().flatten().tolist():
            out.append(report(i, obs.mask[i, :need].tolist() + ["1..."], mask[i].tolist(),
                              "call does not attend exactly the committed slots", call.model))
    if expected is None:
        return out + [report(None, f"{need} cached slots (+ drafts for a draft call)", call.cache_length,
                             "call does not continue the committed stream", call.model)]
    first, (tokens, what) = call.input_ids[:, 0], expected
    for i in (first != tokens).nonzero().flatten().tolist():
        out.append(report(i, int(tokens[i]), int(first[i]), f"first input is not {what}", call.model))
    if call.model == "target" and drafts is not None and call.input_ids.shape[1] > 1:
        fed = call.input_ids[:, 1:]
        if fed.shape != drafts.shape:
            return out + [report(None, tuple(drafts.shape), tuple(fed.shape), "verify input is not the drafts",
                                 call.model)]
        for i in (fed != drafts).any(1).nonzero().flatten().tolist():
            out.append(report(i, drafts[i].tolist(), fed[i].tolist(),
                              "target verified tokens the draft did not propose", call.model))
    return out
