"""Why C1 failed, in the decoder's terms: the messages of :mod:`.correctness` (Spec §3.12.2).

A predicate states its invariant on whole tensors; only when it is false is
the failing element read back, and its cause named as a decoder would have
produced it: a slot that holds zeros, padding or content no call wrote; a
position that lags or runs ahead of the row's chain; a committed token the
row's mask hides (in a cached slot, or as an input the call masks out), most
likely through a mask derived from token values when that token is the pad
id; a crop of the wrong length or another row's.
"""

from __future__ import annotations

import torch

from .chains import Chains
from .slots import PADDING, UNWRITTEN, WRITTEN
from .violation import Violation


def report(chains: Chains, invariant: str, name: str, row: int, expected, actual, detail: str) -> Violation:
    """A violation of ``invariant`` at the call ``chains`` reads, naming its model and number."""
    return Violation(invariant, name, 0, "call", row, expected, actual, detail, chains.call.model, None,
                     chains.number)


def abridged(tokens: list[int]) -> str:
    """``tokens`` for a message: the first six, then an ellipsis."""
    return "[" + ", ".join(map(str, tokens[:6])) + (", …]" if len(tokens) > 6 else "]")


def explain_chain(chains: Chains, i: int, s: int) -> Violation:
    """C1's violation at element ``s`` of row ``i`` (the first that breaks its chain), with
    what it holds against what it should hold and why, in the decoder's terms."""
    t, j = chains.cached, int(chains.rank[i, s])
    token, position, flag = int(chains.token[i, s]), int(chains.position[i, s]), int(chains.flag[i, s])
    where = f"slot {s}" if s < t else f"input {s - t}"
    stream = chains.stream(i, s)
    lead = f"row {i}" + (f" (stream {abridged(stream)})" if stream else "") + f": {where}, element {j} of the chain"
    zeros = s < t and flag in (UNWRITTEN, PADDING) and int(chains.history.hashes[i, s]) == 0  # every bit zero
    if zeros:
        what = "padding" if flag == PADDING else "a slot never written"
        detail = (f"{lead}, holds zeros ({what}, or a key/value zeroed, such as a rejected draft's, still "
                  "attended), not a token of the chain, and the mask attends it")
        return report(chains, "C1", "one_chain", i, f"the key/value of the token at position {j}", "zeros", detail)
    if s < t and flag == UNWRITTEN:
        detail = f"{lead}, holds a key/value that no watched forward call wrote (a stale, blended or foreign slot)"
        return report(chains, "C1", "one_chain", i, f"the key/value of the token at position {j}", "unwritten content", detail)
    if s < t and flag == PADDING:
        detail = (f"{lead}, holds padding (zeros, or the key/value of a masked input), not a token of the "
                  "chain, and the mask attends it")
        return report(chains, "C1", "one_chain", i, f"the key/value of the token at position {j}", "a padding slot", detail)
    if position != j:
        detail = f"{lead}, is token {token} at position {position}" + position_cause(chains, i, s, j, position)
        return report(chains, "C1", "one_chain", i, f"position {j}", f"position {position}", detail)
    detail = (f"{lead}, holds token {token} at position {position} computed after another prefix than the "
              f"{j} tokens the row attends before it (a slot from another row or another round)")
    return report(chains, "C1", "one_chain", i, f"token {token} after {abridged(stream)}", "another prefix", detail)


def position_cause(chains: Chains, i: int, s: int, j: int, position: int) -> str:
    """Why element ``j`` of row ``i``'s chain sits at another position, in the decoder's terms."""
    if s < chains.cached:
        return ": the slot holds another position's key/value"
    if position < j:
        return (" fed: the position ids lag the chain the row attends (not advanced past every token it holds, "
                "such as the last round's bonus token)")
    chosen = chains.history.chosen.get(int(chains.before[i, s]), {})
    if chosen and int(chains.token[i, s]) not in chosen:
        skipped = min(chosen, key=chosen.get)
        hidden = hidden_slot(chains, i, s, j)
        fed = masked_input(chains, i, s, j, skipped)
        where = (f"in slot {hidden}, masked out" if hidden is not None else
                 f"masked out where this call feeds it, as input {fed}" if fed is not None else
                 "cropped, dropped or never written")
        return (f" fed: the chain skips token {skipped} at position {j}, the target's choice there (call "
                f"#{chosen[skipped]}): its key/value is {where} {mask_cause(chains, skipped)}")
    # a committed token the row's mask hides, with positions still counting it (the first call that hid it
    # was flagged at its input; a later call's context is that call's chain, so the hole is found here),
    # written by a call that attended it or fed it masked (a mask read off the token values, at its input)
    hole = next((d for d in diversions(chains, 0, masked_inputs=True) if d[0] == i), None)
    if hole is not None:
        _, h, x, p, chose, _instead = hole
        return (f" fed: the position ids run ahead of the chain the row attends, which masks out slot {h}, "
                f"holding token {x} at position {p}, the target's choice there (call #{chose}): the mask hides "
                f"a committed token {mask_cause(chains, x)}")
    return (" fed: the position ids run ahead of the chain the row attends (counted past the row's own tokens: "
            "from another row's acceptance, the batch's largest one, or holes counted as tokens)")


def mask_cause(chains: Chains, token: int) -> str:
    """The likely cause of a committed ``token`` left out of a row's chain."""
    if token in chains.history.stream.pad:
        return (f"(a mask derived from token values hides every token equal to the pad id {token}, "
                "the target's own output included)")
    return "(a crop or mask of the wrong length, or another row's crop applied to this row)"


def hidden_slot(chains: Chains, i: int, s: int, j: int):
    """A masked cached slot of row ``i`` before ``s`` holding position ``j``, or None."""
    t = min(s, chains.cached)
    if t == 0:
        return None
    labels = chains.history.labels.lookup(chains.history.hashes[i, :t].contiguous())  # [t, 4]
    for h in range(t):
        if not chains.attended[i, h] and int(labels[h, 3]) == WRITTEN and int(labels[h, 1]) == j:
            return h
    return None


def masked_input(chains: Chains, i: int, s: int, j: int, token: int):
    """An input of row ``i`` before ``s``, masked out, that feeds ``token`` at position ``j``, or None."""
    t = chains.cached
    for k in range(t, s):
        if not chains.attended[i, k] and int(chains.call.input_ids[i, k - t]) == token \
                and int(chains.call.position_ids[i, k - t]) == j:
            return k - t
    return None


def diversions(chains: Chains, c: int, masked_inputs: bool = False) -> list[tuple]:
    """Per row, its first masked cached slot from ``c`` on, written by a call that attended it
    (also by one that fed it masked, with ``masked_inputs``), that holds the target's own choice
    continuing the row's chain (same prefix, same position) where the row goes on with another
    token: ``(row, slot, token, position, the call that chose it, the token instead)``."""
    t, att = chains.cached, chains.attended
    label = chains.context[:, c:]  # (before ``checked``: the previous call's holes, looked at then)
    flag = label[..., 3]
    written = ((flag == WRITTEN) | (flag == PADDING)) if masked_inputs else flag == WRITTEN
    hidden = ~att[:, c:t] & (chains.rank[:, c:t] >= 0) & written  # [B, T - c]: holes in the chain
    if not bool(hidden.any()):
        return []
    # the row's element at each label's position (its rank): ranks never fall along a row, and the first slot
    # that reaches a rank holds that element, found by bisection; none when the chain is shorter
    rank = chains.rank.contiguous()
    pos = label[..., 1].clamp(min=0)
    at = torch.searchsorted(rank, pos.contiguous()).clamp(max=rank.shape[1] - 1)  # [B, T - c]
    has = rank.gather(1, at) == pos
    diverts = hidden & has & (chains.before.gather(1, at) == label[..., 2]) & (
        chains.token.gather(1, at) != label[..., 0])
    out, seen = [], set()
    # a few per call (per row, the first rejected draft of each round kept as a hole): read as lists at once
    for (i, s), (x, j, prefix, _flag) in zip(diverts.nonzero().tolist(), label[diverts].tolist()):
        chose = chains.history.chosen.get(prefix, {})
        if i in seen or x not in chose:
            continue  # a rejected draft left as a hole: not the target's choice
        seen.add(i)
        out.append((i, s + c, x, j, chose[x], int(chains.token[i, at[i, s]])))
    return out
