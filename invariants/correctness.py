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
from .causes import diversions, explain_chain, mask_cause, report
from .slots import AMBIGUOUS, BLIND, WRITTEN
from .violation import Violation


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
    if chains.clean or (chains.checked == t and chains.every and chains.at_rank):  # (read as lists: .small)
        return []
    positions = like(chains.call.position_ids, rank)  # [B, n]
    if chains.checked == t and chains.every and chains.at_rank is None and torch.equal(positions, rank[:, t:]):
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
            out.append(explain_chain(chains, i, s))
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
                  f"the mask hides a committed token {mask_cause(chains, x)}")
        out.append(report(chains, "C1", "one_chain", i, f"token {x} at position {j}", f"token {instead}", detail))
    return out


def _detours(chains: Chains) -> list[Violation]:
    """The second half of C1: no row masks out a cached slot that holds the
    target's own choice continuing its chain (same prefix, same position) and
    goes on with another token there. Rejected drafts kept as holes are not
    the target's choice; a committed token hidden by its mask is."""
    out = []
    for i, s, x, j, chose, instead in diversions(chains, chains.checked):
        detail = (f"row {i} masks out slot {s}, which holds token {x} at position {j}: the target's own choice "
                  f"(call #{chose}) after the prefix the row attends, and goes on with token {instead} at "
                  f"position {j} instead: the mask hides a committed token {mask_cause(chains, x)}")
        out.append(report(chains, "C1", "one_chain", i, f"token {x} at position {j}", f"token {instead}", detail))
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
    chains._context, chains._labels, chains.confirmed = chains.context.clone(), None, True
    chains._context[slots] = fresh
    rank, before = chains.rank[:, :t][slots], chains.before[:, :t][slots]
    flag, position = fresh[:, 3], fresh[:, 1]
    ok = (flag == AMBIGUOUS) | ((flag == BLIND) & (position == rank)) | (
        (flag == WRITTEN) & (position == rank) & (fresh[:, 2] == before))
    slots[slots.clone()] = ~ok
    bad[:, :t] = slots


#: The correctness invariants, in order (Spec §3.12): C1 on every forward call, C2 and C3
#: on what the decoder returned (``w.outputs``).
CORRECTNESS = (("C1", one_chain), ("C2", target_choices), ("C3", stops_where_it_should))
