"""C1 on the sliding-window layers of a model (Spec §3.12.2, the window rule).

A layer of window ``W`` lets the input at stream column ``c`` attend the
columns ``c - W + 1 .. c`` its mask attends, and its cache keeps only the
newest of them. What a correct decoder must keep there is what batch-1
decoding keeps: each row's attended window, ordered by position, is the
newest ``min(W, j + 1)`` elements of one chain ending at the input (position
``j``). Each slot's label still names the whole prefix it was computed after,
so the window's first slot pins the chain before it, and the chain hashes the
target's choices are kept under (C2) are the same as a full layer's.

The call is read over the columns that some input's window reaches,
``lo = max(T - W + 1, 0) .. T + n - 1``, as a :class:`ForwardCall` of its own
(its ``cache_length`` is ``T - lo``): :func:`~batchspec.invariants.correctness.one_chain`
then checks the chain, and :func:`window_size` that every input attends a
whole window.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .chains import Chains
from .correctness import one_chain
from .hf_cache import column_hashes
from .history import History
from .observation import ForwardCall
from .slots import AMBIGUOUS, WRITTEN
from .violation import Violation


def _seen(raw, t: int, n: int, w: int, kv_offset: int, name: str) -> torch.Tensor:
    """``[B, n, T + n - lo]`` bool: which of the window's columns each input attends."""
    lo, width = max(t - w + 1, 0), t + n
    q = torch.arange(t, width)[:, None]  # [n, 1] the inputs' stream columns
    c = torch.arange(lo, width)[None, :]  # [1, width - lo]
    shape = (c <= q) & (c > q - w)  # causal, inside the window
    if raw.dim() == 2:
        return (raw[:, None, lo:] != 0) & shape.to(raw.device)
    grid = raw if raw.dtype == torch.bool else raw == 0  # additive masks: 0 where attended
    if grid.shape[1] != 1 or grid.shape[2] != n:
        raise ValueError(f"watch: the {name} model was given a 4D mask {tuple(raw.shape)} for its window layers, "
                         "not one [B, 1, n, kv] mask")
    full = grid.new_zeros((grid.shape[0], n, max(width, kv_offset + grid.shape[3])))
    full[:, :, kv_offset: kv_offset + grid.shape[3]] = grid[:, 0]
    seen = full[:, :, lo:width]
    if bool(full[:, :, :lo].any()) or bool(full[:, :, width:].any()) or not torch.equal(
            seen, seen.any(1, keepdim=True) & shape.to(seen.device)):
        raise ValueError(f"watch: the {name} model was given a 4D mask {tuple(raw.shape)} for its window layers "
                         f"that is not a padding mask made causal within a window of {w}")
    return seen


def window_call(call: ForwardCall, raw, w: int, kv_offset: int) -> tuple[ForwardCall, torch.Tensor]:
    """The call as its window layers see it: a :class:`ForwardCall` over columns
    ``lo .. T + n - 1`` with, per row, the columns some input attends; and
    ``[B, n]`` how many columns each input attends."""
    t, n = call.cache_length, call.input_ids.shape[1]
    if raw is None:
        raw = torch.ones((call.input_ids.shape[0], t + n), dtype=torch.long, device=call.input_ids.device)
    seen = _seen(raw, t, n, w, kv_offset, call.model)
    return replace(call, attention_mask=seen.any(1).long(), cache_length=t - max(t - w + 1, 0)), seen.sum(-1)


def window_chains(history: History, call: ForwardCall, hashes: torch.Tensor, w: int) -> Chains:
    """The window call read as chains (Spec §3.12.2): the first attended slot
    whose label names its prefix (not content that several writers produced
    after other prefixes or as other tokens) gives
    the chain's positions and the hash of the prefix before it; the rest of
    the window continues it. ``hashes`` ``[B, T + n]``: the window's columns, as held."""
    t, ids = call.cache_length, call.input_ids
    history.hashes = hashes
    attended = call.attention_mask != 0  # [B, T + n]
    b = ids.shape[0]
    context = history.labels.lookup(hashes[:, :t].reshape(-1)).view(b, t, 4)
    flag = torch.cat([context[..., 3], torch.full_like(ids, AMBIGUOUS)], 1)
    pins = attended & (flag == WRITTEN)  # slots whose label names their prefix (one writer's, or all alike)
    first = pins.long().argmax(1, keepdim=True)  # [B, 1] the first of them
    pinned = pins.any(1)
    count = attended.cumsum(1)
    labels = torch.cat([context, context.new_zeros((b, ids.shape[1], 4))], 1).gather(1, first[..., None].expand(-1, -1, 4))[:, 0]
    start = torch.where(pinned, labels[:, 1] - count.gather(1, first)[:, 0] + 1, 0)  # [B] the window's first position
    rank = torch.where(count > 0, start[:, None] + count - 1, -1)
    token = torch.cat([context[..., 0], ids], 1)
    weights = history.hasher.weight_table(int(rank.max()) + 1 if rank.numel() else 1, ids.device)
    contrib = (token + 1) * torch.take(weights, rank.clamp(min=0)) * attended
    node = contrib.cumsum(1)
    base = torch.where(pinned, labels[:, 2] - (node - contrib).gather(1, first)[:, 0], 0)  # the hash before the window
    node = base[:, None] + node
    return Chains(history.calls, call, attended, rank, token, node - contrib, node, history, _context=context,
                  window=w)


def window_size(chains: Chains, counts: torch.Tensor, w: int) -> list[Violation]:
    """The window rule's second half: every attended input at position ``j``
    attends ``min(W, j + 1)`` columns; fewer is a hole in its window (a masked
    slot the window still spans), more cannot be a window of one chain."""
    t, call = chains.cached, chains.call
    fed = chains.attended[:, t:]
    want = (call.position_ids.to(counts) + 1).clamp(max=w)
    bad = fed & (counts != want)
    out = []
    for i in bad.any(1).nonzero().flatten().tolist():
        q = int(bad[i].nonzero()[0])
        j, got, should = int(call.position_ids[i, q]), int(counts[i, q]), int(want[i, q])
        detail = (f"row {i}: input {q} at position {j} attends {got} slots of its window of {w}, not {should}: "
                  + ("a masked slot inside the window hides a token of the chain" if got < should else
                     "more than one window's worth of slots"))
        out.append(Violation("C1", "one_chain", 0, "call", i, f"{should} slots", f"{got} slots", detail,
                             call.model, None, chains.number))
    return out


def one_window(chains: Chains, counts: torch.Tensor, w: int) -> list[Violation]:
    """C1 by the window rule (Spec §3.12.2): the window's attended elements are one
    chain (:func:`one_chain` on the window's columns, ranks counted from the pinned
    position), and every attended input sees a whole window (:func:`window_size`)."""
    found = one_chain(chains)
    rows = {v.row for v in found}
    return found + [v for v in window_size(chains, counts, w) if v.row not in rows]


def windows_before(hasher, kinds: dict, cache, t: int, n: int) -> list:
    """Per window kind of a model's layers (``kinds``, from
    :func:`~batchspec.invariants.hf_cache.kinds_of`): ``(W, layers, kv_offset, hashes)``,
    the columns its inputs' windows reach, read *before* the call (a window
    layer drops its oldest column as it writes)."""
    out = []
    for kind, layers in kinds.items():
        if kind == "full":
            continue
        w = kind[1]
        offset = int(cache.get_mask_sizes(n, layers[0])[1]) if cache is not None and t else 0
        with torch.inference_mode():  # (see Correctness._after)
            held = column_hashes(hasher, cache, layers, max(t - w + 1, 0), t) if t else None
        out.append((w, layers, offset, held))
    return out


def check_window(history: History, call: ForwardCall, cache, raw, window: tuple, alone: bool) -> list[Violation]:
    """C1 by the window rule on one window kind of the call's model (Spec §3.12.2).
    ``window``: what :func:`windows_before` read; ``raw``: the attention mask as
    passed; ``alone``: no full-attention layer, so these chains are the call's
    (C2 keeps the target's choices under them)."""
    w, layers, offset, held = window
    if isinstance(raw, dict):  # transformers' per-kind masks (a static cache of a mixed model)
        raw = raw.get("sliding_attention")
    narrow, counts = window_call(call, raw, w, offset)
    t = call.cache_length
    written = column_hashes(history.hasher, cache, layers, t, t + call.input_ids.shape[1])
    hashes = torch.cat([held if held is not None else written.new_zeros((written.shape[0], 0)), written], 1)
    if alone:
        history.calls += 1
    keep = history.hashes
    chains = window_chains(history, narrow, hashes, w)
    found = one_window(chains, counts, w)
    chains.hashes = hashes
    if alone:
        history.remember(chains)
    else:
        history.labels.write(chains)
        history.hashes = keep
    return found
