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

from ._util import like

#: Low bits of a chain hash that index a :class:`HashFilter` (a 1 MiB bit filter: hashes are
#: uniform, so with ``K`` rejected nodes a slot passes it by chance with odds ``K / 2**20``).
FILTER_BITS = 20
_LOW = (1 << FILTER_BITS) - 1
#: Up to this many chain hashes are looked up in the rejected dict one by one (a tensor op costs microseconds
#: whatever its size; a dict look-up, a fraction of one), more through the :class:`HashFilter`.
FEW = 256
#: Up to this many slots times suspects, :meth:`Stream._among` compares every slot with every suspect
#: (a few operations) rather than bisecting each row (a dozen, whatever the size).
SEARCHED = 32768


@dataclass
class Stream:
    """The per-node memo of C1's third clause (Spec §3.12.2)."""

    greedy: bool = True  # False: the decoder samples or searches beams, and the clause (greedy choices) is off
    eos: frozenset = frozenset()  # the target's EOS ids: grounding stops at one
    pad: frozenset = frozenset()  # the target's pad ids (for messages: a mask derived from token values)
    grounded: set = field(default_factory=set)
    rejected: dict = field(default_factory=dict)  # node -> the target call that chose otherwise after its prefix
    order: list = field(default_factory=list)  # the rejected nodes, in the order they were rejected
    fed: dict = field(default_factory=dict)  # rejected node -> the first call that fed it at or after that choice
    late: dict = field(default_factory=dict)  # rejected node -> the first call that fed it after that choice
    odd: dict = field(default_factory=dict)  # node -> the first call that fed it where neither model chose it
    seen: dict = field(default_factory=dict)  # rejected node -> the first call that attended it cached after the choice
    proposed: dict = field(default_factory=dict)  # node -> tokens the draft chose after it
    tested: set = field(default_factory=set)  # nodes a target call was fed
    prefix: dict = field(default_factory=dict)  # rejected node -> the node before it
    reported: set = field(default_factory=set)  # rejected nodes a violation named already
    rank: dict = field(default_factory=dict)  # rejected node -> its index in its chain (a chain hash has one)
    _rejected_filter: "HashFilter | None" = None

    def attended(self, chains) -> list:
        """``[(row, slot)]``, row-major: the cached slots each row attends whose node was
        rejected (computed once per call: the check and :meth:`remember` both read it;
        most often empty, so kept as a list). A call whose first ``c`` cached slots are
        elements of the previous call's chain (``chains._marks``: its pairs, ``c``, how
        many nodes had been rejected then, the nodes it fed) needs no look-up there
        when that call attended none: a node there is one of that call's elements, so
        only the nodes it fed and those rejected since can be rejected now."""
        if chains._rejected is None:
            t, marks = chains.cached, chains._marks
            if marks is None or marks[0]:  # nothing carried, or a call that attended one already: all looked up
                pairs = self._lookup(chains, 0, t)
            else:
                _pairs, c, count, fed = marks
                c = min(c, t)
                suspects = {h for h in fed if h in self.rejected}.union(self.order[count:])
                pairs = self._among(chains, c, suspects) if suspects and c else []
                if c < t:
                    pairs = sorted(pairs + self._lookup(chains, c, t))
            chains._rejected, chains._marked, chains._marks = pairs, len(self.order), None
        return chains._rejected

    def _among(self, chains, c: int, suspects: set) -> list:
        """The attended slots among the first ``c`` whose node is one of ``suspects``. A node
        is a chain hash: it can only be the element of its own index in the chain
        (``rank``), so each row is read at that element alone, found by bisection
        (ranks never fall along a row): the work grows with the suspects, not with
        ``c``. A window's chains (ranks are positions there) are searched whole, and so
        are small ones (up to :data:`SEARCHED` slots times suspects)."""
        node, att, ordered = chains.node[:, :c], chains.attended[:, :c], sorted(suspects)
        found = torch.tensor(ordered, dtype=torch.int64, device=node.device)
        # a window's rejection (no index known), or few slots times suspects: one search of every slot
        # is then fewer operations than the bisection (the same answer: a node is one element's)
        if chains.window or node.numel() * len(ordered) <= SEARCHED or not all(h in self.rank for h in ordered):
            return [(i, s) for i, s in (torch.isin(node, found) & att).nonzero().tolist()]
        rank = chains.rank[:, :c].contiguous()
        at = torch.tensor([self.rank[h] for h in ordered], dtype=torch.int64, device=node.device)
        slot = torch.searchsorted(rank, at.expand(rank.shape[0], -1).contiguous()).clamp(max=c - 1)  # [B, k]
        hit = (node.gather(1, slot) == found) & att.gather(1, slot)
        return sorted((i, int(slot[i, k])) for i, k in hit.nonzero().tolist())

    def _lookup(self, chains, a: int, b: int) -> list:
        """The attended slots ``a .. b-1`` whose node was rejected: a few looked up in the
        rejected dict itself, more through the :class:`HashFilter`."""
        node = chains.node[:, a:b]
        if not self.rejected or node.numel() == 0:
            return []
        if node.numel() <= FEW:  # the previous call's inputs, most often
            width = b - a
            hit = [(k // width, a + k % width) for k, h in enumerate(node.flatten().tolist()) if h in self.rejected]
            return [(i, s) for i, s in hit if bool(chains.attended[i, s])]
        return [(i, a + s) for i, s in (self.member(node) & chains.attended[:, a:b]).nonzero().tolist()]

    def hits(self, chains) -> torch.Tensor:
        """:meth:`attended` as a ``[B, T]`` bool tensor."""
        hits = torch.zeros_like(chains.attended[:, :chains.cached])
        pairs = self.attended(chains)
        if pairs:
            rows, slots = zip(*pairs)
            hits[list(rows), list(slots)] = True
        return hits

    def member(self, node: torch.Tensor) -> torch.Tensor:
        """``node``'s shape, bool: which chain hashes were rejected."""
        if self._rejected_filter is None:
            self._rejected_filter = HashFilter(self.rejected)
        return self._rejected_filter.member(node)

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

    def remember(self, chains, chosen: dict, rows: list, columns: list) -> None:
        """After a call's choices are recorded: walk its attended inputs in chain
        order (the draft's own choices first, for ``odd``), then note which
        rejected nodes it attended from its cache. ``rows, columns``: :func:`fed_inputs`."""
        number, call, t = chains.number, chains.call, chains.cached
        nodes, befores, tokens, ranks = columns
        self._seen(chains, rows, nodes)
        if call.model == "draft" and call.logits is not None:
            self._proposals(chains)
        if self._only_odd(t, nodes, befores, chosen):  # (a prefill, most often: no walk)
            proposed, odd = self.proposed, self.odd
            for node, before, token in zip(nodes, befores, tokens):
                if token not in chosen.get(before, ()) and token not in proposed.get(before, ()):
                    odd.setdefault(node, number)
            return
        continuing = None  # [B]: rows that attend their cache, read when first needed
        for i, node, before, token, rank in zip(rows, nodes, befores, tokens, ranks):
            chose = chosen.get(before, {})
            if token not in chose and token not in self.proposed.get(before, ()):
                self.odd.setdefault(node, number)
            if token in self.eos:
                continue
            if before in self.grounded and chose and token not in chose:
                self._reject(node, min(chose.values()), number, before, None if chains.window else rank)
            elif node in self.rejected:
                continue
            elif before in self.grounded:
                self.grounded.add(node)
            elif token in chose:
                if continuing is None:
                    continuing = chains.attended[:, :t].any(1).tolist()
                if continuing[i]:
                    self.grounded.add(node)

    def _only_odd(self, t: int, nodes: list, befores: list, chosen: dict) -> bool:
        """The walk of :meth:`remember` would ground and reject nothing, only note ``odd``:
        no input follows a grounded prefix, none was rejected, and none follows a prefix
        the target chose after in a call over a non-empty cache (a row that attends
        nothing cached grounds nothing). Set operations, at C speed."""
        return self.grounded.isdisjoint(befores) and self.rejected.keys().isdisjoint(nodes) \
            and (t == 0 or chosen.keys().isdisjoint(befores))

    def _seen(self, chains, rows: list, nodes: list) -> None:
        """Note the rejected nodes a row attends from its cache. A draft call whose
        row feeds only tokens the target was fed already (a catch-up over a
        verified branch, Spec §4.2.1) computes on that branch, not on a wrong
        stream, and is not noted."""
        pairs = self.attended(chains)
        if chains.call.model == "target":
            self.tested.update(nodes)
        elif pairs:
            new = {i for i, node in zip(rows, nodes) if node not in self.tested}
            pairs = [(i, s) for i, s in pairs if i in new]
        if pairs:
            at = torch.tensor(pairs, device=chains.node.device)
            for node in chains.node[at[:, 0], at[:, 1]].tolist():
                self.seen.setdefault(node, chains.number)

    def _reject(self, node: int, chose: int, number: int, before: int, rank: int | None) -> None:
        if rank is not None:
            self.rank.setdefault(node, rank)
        if node not in self.rejected:
            self.order.append(node)
            if self._rejected_filter is not None:
                self._rejected_filter.add(node)
        self.rejected.setdefault(node, chose)
        self.prefix.setdefault(node, before)
        self.fed.setdefault(node, number)
        if number > self.rejected[node]:
            self.late.setdefault(node, number)

    def _proposals(self, chains) -> None:
        """Note the draft's choice after every attended input its logits cover."""
        covered = chains.choices()
        for node, chose in zip(*covered) if covered else ():
            self.proposed.setdefault(node, set()).add(chose)


def fed_inputs(chains) -> tuple[list, list]:
    """``(rows, [nodes, befores, tokens, ranks])``: the call's attended inputs in chain
    order, as plain lists (one transfer; no index when every row feeds every input)."""
    t, every = chains.cached, chains.every
    b, n = chains.call.input_ids.shape
    if every and chains.lists is not None:  # read as lists (.small)
        return sorted(list(range(b)) * n), list(chains.lists)
    fed = chains.attended[:, t:]
    if every and chains.quad is not None:  # rank, token, before, node side by side (History._inputs)
        ranks, tokens, befores, nodes = chains.quad[:, t:].flatten(0, 1).T.tolist()
        columns = [nodes, befores, tokens, ranks]
    else:
        table = torch.stack([chains.node[:, t:], chains.before[:, t:], like(chains.call.input_ids, chains.node),
                             chains.rank[:, t:]])
        if not every:
            return fed.nonzero()[:, 0].tolist(), table[:, fed].tolist()
        columns = table.flatten(1).tolist()
    return sorted(list(range(b)) * n), columns  # each input's row, row-major


class HashFilter:
    """Membership of chain hashes in a growing set, read for a whole tensor at once:
    one gather into a bit filter of the members' low :data:`FILTER_BITS` bits,
    then an exact look-up of the few that pass (hashes are uniform, so with
    ``K`` members a non-member passes with odds ``K / 2**FILTER_BITS``). No
    sort, and no work that grows with the set."""

    def __init__(self, members):
        self.members = members  # the set (or dict) itself, read at every look-up
        self._bits: torch.Tensor | None = None
        self._unfiled: list = list(members)

    def add(self, h: int) -> None:
        """Note ``h``, just added to ``members``."""
        self._unfiled.append(h)

    def member(self, node: torch.Tensor) -> torch.Tensor:
        if not self.members or node.numel() == 0:
            return torch.zeros(node.shape, dtype=torch.bool, device=node.device)
        if self._bits is None or self._bits.device != node.device:
            self._bits = torch.zeros(1 << FILTER_BITS, dtype=torch.bool, device=node.device)
            self._unfiled = list(self.members)
        if self._unfiled:
            self._bits[torch.tensor(self._unfiled, dtype=torch.int64, device=node.device) & _LOW] = True
            self._unfiled = []
        maybe = self._bits[node & _LOW]
        if bool(maybe.any()):
            maybe[maybe.clone()] = torch.tensor([h in self.members for h in node[maybe].tolist()],
                                                dtype=torch.bool, device=node.device)
        return maybe


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
