"""What each token of a stream was to the target when a call fed it (Spec §3.12.2, C1's third clause).

C1 as first stated checks that a row attends *one* chain; it cannot tell a
chain the target accepted from one it rejected. This memo, owned by one
:class:`~batchspec.invariants.history.History`, remembers per chain element
(its chain hash, the *node*) what the calls' inputs showed:

* ``grounded``: nodes whose chain holds a **verified** token: one a
  continuing row (one that attends its cache) fed after exactly the prefix
  on which a target call had chosen it. A prompt is never verified (a
  prefill row attends nothing cached), so the target's choices on a prompt
  bind nothing, and a prompt token fed after them (the newest one, left out
  of the prefill) stays legal;
* ``rejected``: nodes ``x_<j + y`` with ``x_<j`` grounded where the target
  had chosen after ``x_<j`` and ``y`` is not its choice, with the call that
  chose. Feeding one is legal (verification feeds drafts, even drafts whose
  rejection a decoder could already know); a *target* call that attends one
  from its cache builds on a stream the target rejected;
* for the message and for the trace of C2, per rejected node the calls that
  mark a decoder's first wrong call: the first that fed it after the target
  had chosen otherwise (``late``), the first that fed it where neither model
  had chosen it (``odd``: a token made up or repeated), the first that
  attended it from its cache after the choice (``seen``).

An EOS ends grounding: what a decoder feeds a finished row is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Stream:
    """The per-node memo of C1's third clause (Spec §3.12.2)."""

    greedy: bool = True  # False: the decoder samples or searches beams, and the clause (greedy choices) is off
    eos: frozenset = frozenset()  # the target's EOS ids: grounding stops at one
    pad: frozenset = frozenset()  # the target's pad ids (for messages: a mask derived from token values)
    grounded: set = field(default_factory=set)
    rejected: dict = field(default_factory=dict)  # node -> the target call that chose otherwise after its prefix
    fed: dict = field(default_factory=dict)  # rejected node -> the first call that fed it at or after that choice
    late: dict = field(default_factory=dict)  # rejected node -> the first call that fed it after that choice
    odd: dict = field(default_factory=dict)  # node -> the first call that fed it where neither model chose it
    seen: dict = field(default_factory=dict)  # rejected node -> the first call that attended it cached after the choice
    proposed: dict = field(default_factory=dict)  # node -> tokens the draft chose after it
    tested: set = field(default_factory=set)  # nodes a target call was fed
    prefix: dict = field(default_factory=dict)  # rejected node -> the node before it
    reported: set = field(default_factory=set)  # rejected nodes a violation named already
    _keys: torch.Tensor | None = None  # the rejected nodes, sorted, for torch.isin

    def attended(self, chains) -> torch.Tensor:
        """``[B, T]`` bool: the cached slots each row attends whose node was rejected
        (computed once per call: the check and :meth:`remember` both read it)."""
        if chains._rejected is None:
            t = chains.cached
            if not self.rejected or t == 0:
                chains._rejected = torch.zeros((chains.attended.shape[0], t), dtype=torch.bool,
                                               device=chains.attended.device)
            else:
                node = chains.node[:, :t]
                chains._rejected = torch.isin(node, self._sorted(node.device)) & chains.attended[:, :t]
        return chains._rejected

    def _sorted(self, device) -> torch.Tensor:
        """The rejected nodes as a tensor, extended by the ones added since it was built."""
        if self._keys is None or self._keys.numel() != len(self.rejected):
            have = 0 if self._keys is None else self._keys.numel()
            added = torch.tensor(list(self.rejected)[have:], dtype=torch.int64,  # dicts keep insertion order
                                 device=device if self._keys is None else self._keys.device)
            self._keys = added if self._keys is None else torch.cat([self._keys, added])
        if self._keys.device != device:
            self._keys = self._keys.to(device)
        return self._keys

    def first_wrong(self, node: int, default=None):
        """The decoder's first wrong call on rejected ``node``, once a call built on it
        (fed it again after the choice, or attended it cached); else ``default``."""
        built = [c for c in (self.late.get(node), self.seen.get(node)) if c is not None]
        if not built:
            return default
        return min(built + ([self.odd[node]] if node in self.odd else []))

    def branches(self, stream: set) -> list[int]:
        """The first wrong calls of the rejected nodes that branch off ``stream`` (a set of
        nodes: a returned stream's prefixes) and that a call built on."""
        found = (self.first_wrong(node) for node, before in self.prefix.items() if before in stream and
                 node not in stream)
        return [c for c in found if c is not None]

    def remember(self, chains, chosen: dict) -> None:
        """After a call's choices are recorded: walk its attended inputs in chain
        order (the draft's own choices first, for ``odd``), then note which
        rejected nodes it attended from its cache."""
        number, call, t = chains.number, chains.call, chains.cached
        fed = chains.attended[:, t:]
        rows = fed.nonzero()[:, 0].tolist()
        nodes, befores = chains.node[:, t:][fed].tolist(), chains.before[:, t:][fed].tolist()
        self._seen(chains, rows, nodes)
        if call.model == "draft" and call.logits is not None:
            self._proposals(chains)
        continuing = chains.attended[:, :t].any(1).tolist()  # [B]: rows that attend their cache
        for i, node, before, token in zip(rows, nodes, befores, call.input_ids[fed].tolist()):
            chose = chosen.get(before, {})
            if token not in chose and token not in self.proposed.get(before, ()):
                self.odd.setdefault(node, number)
            if token in self.eos:
                continue
            if before in self.grounded and chose and token not in chose:
                self._reject(node, min(chose.values()), number, before)
            elif (before in self.grounded or (continuing[i] and token in chose)) and node not in self.rejected:
                self.grounded.add(node)

    def _seen(self, chains, rows: list, nodes: list) -> None:
        """Note the rejected nodes a row attends from its cache. A draft call whose
        row feeds only tokens the target was fed already (a catch-up over a
        verified branch, Spec §4.2.1) computes on that branch, not on a wrong
        stream, and is not noted."""
        hits = self.attended(chains)
        if chains.call.model == "target":
            self.tested.update(nodes)
        elif bool(hits.any()):
            new = {i for i, node in zip(rows, nodes) if node not in self.tested}
            hits = hits.clone()
            hits[[i for i in range(hits.shape[0]) if i not in new]] = False
        for node in chains.node[:, :chains.cached][hits].tolist():
            self.seen.setdefault(node, chains.number)

    def _reject(self, node: int, chose: int, number: int, before: int) -> None:
        self.rejected.setdefault(node, chose)
        self.prefix.setdefault(node, before)
        self.fed.setdefault(node, number)
        if number > self.rejected[node]:
            self.late.setdefault(node, number)

    def _proposals(self, chains) -> None:
        call, t = chains.call, chains.cached
        n, kept = call.input_ids.shape[1], call.logits.shape[1]
        if kept == 0 or kept > n:
            return
        fed = chains.attended[:, t + n - kept:]
        choice = call.logits.argmax(-1).to(fed.device)[fed]
        for node, chose in zip(chains.node[:, t + n - kept:][fed].tolist(), choice.tolist()):
            self.proposed.setdefault(node, set()).add(chose)


def special_ids(model) -> tuple[frozenset, frozenset]:
    """``(eos ids, pad ids)`` of ``model``, from its generation config, else its config."""
    out = []
    for name in ("eos_token_id", "pad_token_id"):
        ids = set()
        for config in (getattr(model, "generation_config", None), getattr(model, "config", None)):
            value = getattr(config, name, None)
            ids |= set(value) if isinstance(value, (list, tuple)) else ({int(value)} if value is not None else set())
        out.append(frozenset(ids))
    return out[0], out[1]
