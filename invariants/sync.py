"""I4 draft/target synchronisation (Spec §3.4)."""

from __future__ import annotations

import torch

from ._util import on, reporter, same, where_wrong
from .memo import Memo
from .observation import ForwardCall, Observation
from .violation import Violation


def draft_target_sync(obs: Observation, memo: Memo | None = None) -> list[Violation]:
    """Both models describe the same committed stream for every row (Spec §3.4):

    * at a round boundary both caches hold the same number of slots, or the
      draft's one fewer (the deferred catch-up, Spec §4.2.1: its next call
      feeds the slot it lacks);
    * every call attends exactly the grid's committed slots (its mask over
      slots ``0 .. L-2`` equals the grid mask) and all slots after them;
    * every call feeds what the row holds right after its cache of ``T``
      slots (on the slots it attends): a call over a cache shorter than
      ``L - 1`` (a prefill that fed nothing, Spec §4.1) the committed slots it
      lacks; a call that reaches the newest committed token leads with it
      there; a later draft call feeds the previous draft; the target's
      verify call feeds exactly the drafts proposed.
    """
    report = reporter(obs, "I4", "draft_target_sync")
    memo = memo or Memo()
    out: list[Violation] = []
    lengths = {m: v.length for m, v in obs.caches.items()}
    if obs.boundary and lengths.get("draft", lengths.get("target")) not in (
            lengths.get("target"), (lengths.get("target") or 0) - 1):
        out.append(report(None, "equal cache lengths (the draft's may be one fewer)", lengths,
                          "the two caches describe different streams"))
    for call in obs.calls:
        if call.input_ids.shape[1] == 0:
            continue
        inputs, t = _after_committed(obs, call)  # [B, n'] the inputs from slot max(T, L-1) on
        lead = _first_input(obs, call.model, t, inputs)  # (tokens [B], what) or None
        drafts = _verified(obs, call.model, inputs)  # [B, k'] what a verify call must feed after its lead, or None
        # the statement: the committed slots and all after attended, the committed slots the cache lacked
        # fed, the right lead, the drafts verified
        if (_attends_committed(obs, call, memo) and _feeds_committed(obs, call)
                and (inputs.shape[1] == 0 or lead is not None and same(inputs[:, 0], lead[0]))
                and (drafts is None or same(inputs[:, 1:], drafts))):
            continue
        out.extend(_unsynced(obs, call, inputs, lead, drafts, report))
    return out


def _after_committed(obs: Observation, call: ForwardCall) -> tuple[torch.Tensor, int]:
    """``(inputs, t)``: the call's inputs from slot ``t = max(T, L - 1)`` on, where
    the newest committed token and the drafts go; before them, a call over a
    shorter cache feeds committed slots (:func:`_feeds_committed`)."""
    need, t = obs.width - 1, call.cache_length
    return call.input_ids[:, max(need - t, 0):], max(t, need)


def _feeds_committed(obs: Observation, call: ForwardCall) -> bool:
    """A call over a cache of ``T < L - 1`` slots feeds grid slots ``T .. L-2``
    first, where it attends them (padding slots may hold anything)."""
    need, t = obs.width - 1, call.cache_length
    if t >= need:
        return True
    fed, held = call.input_ids[:, : need - t], on(obs.tokens[:, t:need], call.input_ids.device)
    attended = call.attention_mask[:, t:need] != 0
    return fed.shape == held.shape and same(torch.where(attended, fed, held), held)


def _first_input(obs: Observation, model: str, t: int, inputs: torch.Tensor):
    """``(tokens [B], what)`` the inputs from slot ``t`` must lead with, or None when
    ``t`` is neither ``L - 1`` (the newest token) nor that plus some drafts (a later draft call)."""
    need, drafts = obs.width - 1, obs.draft_tokens
    device = inputs.device  # the grid and the drafts may live on another device than the call
    if t == need:
        return on(obs.tokens[:, -1], device), "the newest committed token"
    if drafts is not None and model == "draft" and 0 < t - need <= drafts.shape[1]:
        return on(drafts[:, t - need - 1], device), f"draft {t - need}"
    return None


def _verified(obs: Observation, model: str, inputs: torch.Tensor) -> torch.Tensor | None:
    """The drafts ``[B, k']`` a target call that verifies must feed after its lead
    (on the call's device), or None for any other call."""
    if model != "target" or obs.draft_tokens is None or inputs.shape[1] <= 1:
        return None
    return on(obs.draft_tokens, inputs.device)


def _covers(obs: Observation, call: ForwardCall) -> bool:
    """The call's mask spans its cache and inputs and the committed slots (else I2 reports it)."""
    mask = call.attention_mask
    return mask.shape[1] == call.cache_length + call.input_ids.shape[1] and mask.shape[1] >= obs.width - 1


def _attends_committed(obs: Observation, call: ForwardCall, memo: Memo) -> bool:
    """The call's mask over slots ``0 .. L-2`` is the grid mask, and every slot
    after them is attended: one comparison with the mask it must be."""
    need, mask = obs.width - 1, call.attention_mask
    if not _covers(obs, call):
        return True
    return mask.shape[0] == obs.mask.shape[0] and obs.mask.shape[1] >= need and torch.equal(
        mask, memo.extended_mask(obs.mask, need, mask.shape[1], mask.device, mask.dtype))


def _unsynced(obs: Observation, call: ForwardCall, inputs, lead, drafts, report) -> list[Violation]:
    """Every row where ``call`` breaks :func:`draft_target_sync`, expected against actual."""
    out: list[Violation] = []
    need, mask = obs.width - 1, call.attention_mask
    if _covers(obs, call) and obs.mask.shape[1] < need:
        out.append(report(None, f"a grid mask over the {need} committed slots", obs.mask.shape[1],
                          "the grid mask does not cover the committed slots the call attends", call.model))
    elif _covers(obs, call):
        grid = on(obs.mask[:, :need], mask.device)
        for i, _ in where_wrong((mask[:, :need] != grid).any(1) | (mask[:, need:] == 0).any(1)):
            out.append(report(i, obs.mask[i, :need].tolist() + ["1..."], mask[i].tolist(),
                              "call does not attend exactly the committed slots", call.model))
    if not _feeds_committed(obs, call):
        t = call.cache_length
        fed, held = call.input_ids[:, : need - t], obs.tokens[:, t:need]
        for i in range(min(fed.shape[0], held.shape[0])):
            wrong = [s for s in range(min(fed.shape[1], held.shape[1]))
                     if bool(call.attention_mask[i, t + s]) and int(fed[i, s]) != int(held[i, s])]
            if wrong or fed.shape[1] != held.shape[1]:
                out.append(report(i, held[i].tolist(), fed[i].tolist(),
                                  f"call over {t} cached slots does not feed the committed slots after them",
                                  call.model))
    if inputs.shape[1] == 0:
        return out
    if lead is None:
        return out + [report(None, f"{need} cached slots (+ drafts for a draft call)", call.cache_length,
                             "call does not continue the committed stream", call.model)]
    first, (tokens, what) = inputs[:, 0], lead
    for i, _ in where_wrong(first != tokens):
        out.append(report(i, int(tokens[i]), int(first[i]), f"first input is not {what}", call.model))
    if drafts is not None:
        fed = inputs[:, 1:]
        if fed.shape != drafts.shape:
            return out + [report(None, tuple(drafts.shape), tuple(fed.shape), "verify input is not the drafts",
                                 call.model)]
        for i, _ in where_wrong(fed != drafts):
            out.append(report(i, drafts[i].tolist(), fed[i].tolist(),
                              "target verified tokens the draft did not propose", call.model))
    return out
