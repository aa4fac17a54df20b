"""The correctness invariants C1-C3: true of every correct greedy speculative decoder (Spec §3.12).

Unlike I1-I8, which describe the compact layout and EQSPEC's call schedule,
these say nothing about padding, slot indices, cache lengths or which calls a
decoder makes. They are stated per forward call and per row, and a row is
identified by its content (the chain it attends), never by its index:

* **C1 one chain** (:func:`one_chain`): a row's attended cached slots, in slot
  order, then its attended inputs, are one chain ``x_0, x_1, ...`` at
  positions ``0, 1, ...``: each attended slot holds what a forward call wrote
  for token ``x_j`` at position ``j`` after exactly ``x_0 .. x_{j-1}``, and
  each input is fed at the position equal to its index in the chain; no
  row hides a committed token; and no target call attends from its cache a
  token after a prefix on which the target had chosen another
  (:func:`_rejected`, :mod:`.stream`), reported at the decoder's first wrong
  call.
* **C2 the target's choices** (:func:`target_choices`, from ``w.outputs``):
  every returned token after the prompt is the target's greedy choice on
  exactly the prefix before it, computed by one of the watched target calls
  (a wrong token is traced to the first call that built on it).
* **C3 stops where it should** (:func:`stops_where_it_should`, from
  ``w.outputs``): the output ends at the first EOS it generated, or at its
  budget.

Why the token check reads the outputs and not the calls: from calls alone a
prompt token cannot be told from a generated one (a decoder that leaves the
newest prompt token out of its prefill feeds it after a target call that
"chose" something else), and a correct decoder may compute on rejected
branches (a catch-up call over the whole batch, finished rows kept running);
only what it *returns* must be the target's. Spec §3.12.5 records these as
non-invariants.
"""

from __future__ import annotations

import torch

from ._util import like, on
from .chains import Chains
from .outputs import stops_where_it_should, target_choices
from .slots import AMBIGUOUS, BLIND, PADDING, UNWRITTEN, WRITTEN
from .violation import Violation


def _report(chains: Chains, invariant: str, name: str, row: int, expected, actual, detail: str) -> Violation:
    return Violation(invariant, name, 0, "call", row, expected, actual, detail, chains.call.model, None,
                     chains.number)


def _head(tokens: list[int]) -> str:
    return "[" + ", ".join(map(str, tokens[:6])) + (", …]" if len(tokens) > 6 else "]")


def one_chain(chains: Chains) -> list[Violation]:
    """C1 (Spec §3.12.2): every row's attended slots, then its attended inputs,
    are one chain at positions ``0, 1, 2, …``. Per row, the first element that
    breaks it, with what it holds against what it should hold.

    Stated directly: an attended cached slot must carry a label written for
    position ``rank`` after the prefix ``before`` (its chain so far), and an
    attended input must be fed at position ``rank``. The test below is that
    statement on whole tensors; only a slot whose content several writers
    produced from other prefixes (``BLIND``) or other tokens (``AMBIGUOUS``)
    is let through on less (the position, or nothing)."""
    # the third clause reads whole chains: on a window layer the chain starts inside the window,
    # so it is checked on full-attention layers only (a mixed model's full layers carry it)
    # and only when the decoder is greedy (watch(greedy=False): a sampled token is not the argmax)
    greedy, target = chains.history.stream.greedy, chains.call.model == "target"
    rejected = _rejected(chains) if target and greedy and not chains.window else []
    return rejected + [v for v in _chain(chains) if v.row not in {r.row for r in rejected}]


def _chain(chains: Chains) -> list[Violation]:
    """C1's first two clauses: one chain at positions ``0, 1, …``; no committed token hidden."""
    t, att, rank = chains.cached, chains.attended, chains.rank
    positions = like(chains.call.position_ids, rank)  # [B, n]
    if chains.checked == t and chains.every and torch.equal(positions, rank[:, t:]):
        return []  # the common case: the checked chain, extended by inputs fed at their indices
    fed = positions == rank[:, t:]  # [B, n]
    hidden = ~att[:, t:] & (rank[:, t:] >= 0)  # inputs masked out after the chain began
    c = chains.checked  # the first ``c`` cached slots: the previous call's chain there, checked then
    if c == t and bool((fed | ~att[:, t:]).all()) and not bool(hidden.any()):
        return []
    held = att[:, :0]
    if c < t:  # (a context not read yet stays unread when every cached slot was checked)
        label = chains.context[:, c:]
        flag = label[..., 3]
        held = (label[..., 1] == rank[:, c:t]) & (flag <= BLIND) & (
            (label[..., 2] == chains.before[:, c:t]) | (flag == BLIND))  # [B, T - c]
    bad = att[:, c:] & ~torch.cat([held, fed], 1)  # [B, T + n - c]
    out = []
    if bool(bad.any()):
        bad = torch.cat([bad.new_zeros((bad.shape[0], c)), bad], 1)
        _confirm(chains, bad)
        for i in bad.any(1).nonzero().flatten().tolist():
            s = int(bad[i].nonzero()[0])
            out.append(_explain_chain(chains, i, s))
    rows = {v.row for v in out}
    if chains.checked != t and not chains.window:  # in a window a hidden slot shrinks it (window_size)
        out += [v for v in _detours(chains) if v.row not in rows]
        rows = {v.row for v in out}
    if bool(hidden.any()):
        out += [v for v in _hidden_inputs(chains) if v.row not in rows]
    return out


def _rejected(chains: Chains) -> list[Violation]:
    """C1's third clause (Spec §3.12.2): no target call attends from its cache a
    token after a prefix on which an earlier target call had chosen another
    (:mod:`.stream`). Per row, the earliest such slot, reported at the
    decoder's first wrong call on it, naming the call that chose and the one
    that fed the token."""
    memo, chosen, out = chains.history.stream, chains.history.chosen, []
    if not memo.attended(chains):
        return []
    hits = memo.hits(chains)
    if memo.reported:  # each rejected token once: at the first call that attends it
        hits = hits & ~torch.isin(chains.node[:, :chains.cached], torch.tensor(sorted(memo.reported)).to(hits.device))
    first = torch.where(hits, chains.rank[:, :chains.cached], torch.iinfo(torch.int64).max).argmin(1)  # [B]
    for i in hits.any(1).nonzero().flatten().tolist():
        s = int(first[i])
        node, before = int(chains.node[i, s]), int(chains.before[i, s])
        token, j, chose = int(chains.token[i, s]), int(chains.rank[i, s]), memo.rejected[int(chains.node[i, s])]
        choice = min(chosen[before], key=chosen[before].get)
        fed, late, odd = memo.fed[node], memo.late.get(node), memo.odd.get(node)
        weight = chains.history.hasher.chain_weights(j + 1, chains.node.device)[j]
        after = int(chains.before[i, s] + (choice + 1) * weight)  # the node of the choice (wrapping int64)
        if token in chosen.get(after, {}):
            why = (f"the row holds {token}, the target's choice after {choice}, where {choice} belongs: the key/value "
                   f"of the committed {choice} was cropped or dropped (a crop of the wrong length, or another row's)")
        elif odd is not None and odd < chose:
            why = (f"call #{odd} fed it where neither model had chosen it (a token repeated or made up, then "
                   "committed unverified)")
        elif late is not None and fed == chose:
            why = (f"call #{late} fed it after that choice, as a committed token: a draft the target rejected "
                   f"(call #{chose} was fed it) was committed")
        elif late is not None:
            why = (f"call #{late} fed it after that choice, as a committed token, and no target call had been fed "
                   "it there: an unverified token committed (a bonus taken from the draft, or a row without drafts "
                   "this round committing the draft's token)")
        else:
            why = (f"call #{fed} fed it as a draft, to be verified, and the target rejected it there: a rejected "
                   "draft left attended (the mask, a crop or a cache offset kept it)")
        detail = (f"target call #{chains.number}, row {i}, attends from its cache (slot {s}) token {token} at "
                  f"position {j}, on a stream the target rejected: call #{chose} chose {choice} after the same {j} "
                  f"tokens; {why}")
        call = memo.first_wrong(node, chains.number)
        memo.reported.add(node)
        out.append(Violation("C1", "one_chain", 0, "call", i, f"token {choice} at position {j}", f"token {token}",
                             detail, "target" if call == chains.number else None, None, call))
    return out


def _hidden_inputs(chains: Chains) -> list[Violation]:
    """The same on the inputs: no row feeds, masked out, the target's own choice
    after the chain it attends, then goes on with another token at that position."""
    t, att, out, seen = chains.cached, chains.attended, [], set()
    hidden = ~att[:, t:] & (chains.rank[:, t:] >= 0)  # [B, n]: read as lists once, then plain Python
    tokens, prefixes = torch.stack([chains.token[:, t:], chains.before[:, t:]])[:, hidden].tolist()
    for (i, s), x, prefix in zip(hidden.nonzero().tolist(), tokens, prefixes):
        s, chose = s + t, chains.history.chosen.get(prefix, {})
        later = att[i, s:].nonzero().flatten().tolist() if i not in seen and x in chose else []
        if not later or int(chains.token[i, s + later[0]]) == x:
            continue
        seen.add(i)
        j, instead = int(chains.rank[i, s]) + 1, int(chains.token[i, s + later[0]])
        detail = (f"row {i} feeds token {x} masked out (input {s - t}): the target's own choice (call #{chose[x]}) "
                  f"after the prefix the row attends, and goes on with token {instead} at position {j} instead: "
                  f"the mask hides a committed token {_mask_cause(chains, x)}")
        out.append(_report(chains, "C1", "one_chain", i, f"token {x} at position {j}", f"token {instead}", detail))
    return out


def _detours(chains: Chains) -> list[Violation]:
    """The second half of C1: no row masks out a cached slot that holds the
    target's own choice continuing its chain (same prefix, same position) and
    goes on with another token there. Rejected drafts kept as holes are not
    the target's choice; a committed token hidden by its mask is."""
    t, c, att = chains.cached, chains.checked, chains.attended
    label = chains.context[:, c:]  # (before ``checked``: the previous call's holes, looked at then)
    hidden = ~att[:, c:t] & (chains.rank[:, c:t] >= 0) & (label[..., 3] == WRITTEN)  # [B, T - c]: holes in the chain
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
        instead, s = int(chains.token[i, at[i, s]]), s + c
        detail = (f"row {i} masks out slot {s}, which holds token {x} at position {j}: the target's own choice "
                  f"(call #{chose[x]}) after the prefix the row attends, and goes on with token {instead} at "
                  f"position {j} instead: the mask hides a committed token {_mask_cause(chains, x)}")
        out.append(_report(chains, "C1", "one_chain", i, f"token {x} at position {j}", f"token {instead}", detail))
    return out


def _confirm(chains: Chains, bad: torch.Tensor) -> None:
    """Re-read the label of every cached slot in ``bad`` from the label table
    (a carried label is one writer's; the table knows when several writers
    produced the same content) and clear those that then pass: content no
    writer can tell apart (``AMBIGUOUS``), or that does not show its prefix
    (``BLIND``) at the right position."""
    t = chains.cached
    slots = bad[:, :t]
    if not bool(slots.any()):
        return
    fresh = chains.history.labels.lookup(on(chains.history.hashes[:, :t], slots.device)[slots])  # [M, 4]
    chains._context, chains._labels = chains.context.clone(), None
    chains._context[slots] = fresh
    rank, before = chains.rank[:, :t][slots], chains.before[:, :t][slots]
    flag, position = fresh[:, 3], fresh[:, 1]
    ok = (flag == AMBIGUOUS) | ((flag == BLIND) & (position == rank)) | (
        (flag == WRITTEN) & (position == rank) & (fresh[:, 2] == before))
    slots[slots.clone()] = ~ok
    bad[:, :t] = slots


def _explain_chain(chains: Chains, i: int, s: int) -> Violation:
    t, j = chains.cached, int(chains.rank[i, s])
    token, position, flag = int(chains.token[i, s]), int(chains.position[i, s]), int(chains.flag[i, s])
    where = f"slot {s}" if s < t else f"input {s - t}"
    stream = chains.stream(i, s)
    lead = f"row {i}" + (f" (stream {_head(stream)})" if stream else "") + f": {where}, element {j} of the chain"
    zeros = s < t and flag in (UNWRITTEN, PADDING) and int(chains.history.hashes[i, s]) == 0  # every bit zero
    if zeros:
        what = "padding" if flag == PADDING else "a slot never written"
        detail = (f"{lead}, holds zeros ({what}, or a key/value zeroed, such as a rejected draft's, still "
                  "attended), not a token of the chain, and the mask attends it")
        return _report(chains, "C1", "one_chain", i, f"the key/value of the token at position {j}", "zeros", detail)
    if s < t and flag == UNWRITTEN:
        detail = f"{lead}, holds a key/value that no watched forward call wrote (a stale, blended or foreign slot)"
        return _report(chains, "C1", "one_chain", i, f"the key/value of the token at position {j}", "unwritten content", detail)
    if s < t and flag == PADDING:
        detail = (f"{lead}, holds padding (zeros, or the key/value of a masked input), not a token of the "
                  "chain, and the mask attends it")
        return _report(chains, "C1", "one_chain", i, f"the key/value of the token at position {j}", "a padding slot", detail)
    if position != j:
        detail = f"{lead}, is token {token} at position {position}" + _position_cause(chains, i, s, j, position)
        return _report(chains, "C1", "one_chain", i, f"position {j}", f"position {position}", detail)
    detail = (f"{lead}, holds token {token} at position {position} computed after another prefix than the "
              f"{j} tokens the row attends before it (a slot from another row or another round)")
    return _report(chains, "C1", "one_chain", i, f"token {token} after {_head(stream)}", "another prefix", detail)


def _position_cause(chains: Chains, i: int, s: int, j: int, position: int) -> str:
    """Why element ``j`` of row ``i``'s chain sits at another position, in the decoder's terms."""
    if s < chains.cached:
        return ": the slot holds another position's key/value"
    if position < j:
        return (" fed: the position ids lag the chain the row attends (not advanced past every token it holds, "
                "such as the last round's bonus token)")
    chosen = chains.history.chosen.get(int(chains.before[i, s]), {})
    if chosen and int(chains.token[i, s]) not in chosen:
        skipped = min(chosen, key=chosen.get)
        hidden = _hidden(chains, i, s, j)
        where = (f"in slot {hidden}, masked out" if hidden is not None else "cropped, dropped or never written")
        return (f" fed: the chain skips token {skipped} at position {j}, the target's choice there (call "
                f"#{chosen[skipped]}): its key/value is {where} {_mask_cause(chains, skipped)}")
    return (" fed: the position ids run ahead of the chain the row attends (counted past the row's own tokens: "
            "from another row's acceptance, the batch's largest one, or holes counted as tokens)")


def _mask_cause(chains: Chains, token: int) -> str:
    """The likely cause of a committed ``token`` left out of a row's chain."""
    if token in chains.history.stream.pad:
        return (f"(a mask derived from token values hides every token equal to the pad id {token}, "
                "the target's own output included)")
    return "(a crop or mask of the wrong length, or another row's crop applied to this row)"


def _hidden(chains: Chains, i: int, s: int, j: int):
    """A masked cached slot of row ``i`` before ``s`` holding position ``j``, or None."""
    t = min(s, chains.cached)
    if t == 0:
        return None
    labels = chains.history.labels.lookup(chains.history.hashes[i, :t].contiguous())  # [t, 4]
    for h in range(t):
        if not chains.attended[i, h] and int(labels[h, 3]) == WRITTEN and int(labels[h, 1]) == j:
            return h
    return None


#: The correctness invariants, in order (Spec §3.12): C1 on every forward call, C2 and C3
#: on what the decoder returned (``w.outputs``).
CORRECTNESS = (("C1", one_chain), ("C2", target_choices), ("C3", stops_where_it_should))
