"""What the correctness checker remembers across calls, and how it reads a call (Spec §3.12).

:class:`History` is owned by one ``watch`` (never module state). It holds:

* the :class:`~batchspec.invariants.slots.LabelTable`: every slot content a
  call wrote, with the token, position and prefix it was computed from;
* ``chosen``: for every chain the target was run on, the tokens its logits
  chose next (one, unless rounding differs between calls), each with the
  first call that chose it;
* ``log``: per call, the chain hashes of its rows' elements, so that a wrong
  output token is traced to the first call that built on it after the
  target had chosen otherwise;
* ``carried``: per model, the hashes and labels of its cache after its last
  call, so that a call whose cached slots are unchanged needs no look-up.

:meth:`History.read` turns one :class:`~batchspec.invariants.observation.ForwardCall`
plus the cache it ran with into :class:`~batchspec.invariants.chains.Chains`:
per row, every attended slot and input as an element of one chain, with what
its label says and the hash of the chain before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._util import like, on
from .calllog import CallLog
from .chains import UNREAD, Chains, Moved, link
from .columns import Columns, head, same_view
from .observation import ForwardCall
from .slots import UNWRITTEN, Hasher, LabelTable
from .small import few, few_changed
from .stream import Stream, fed_inputs


@dataclass
class History:
    """The correctness checker's memory of one run (Spec §3.12)."""

    hasher: Hasher = field(default_factory=Hasher)
    labels: LabelTable = field(default_factory=LabelTable)
    chosen: dict = field(default_factory=dict)  # chain hash -> {token the target chose next: first call}
    log: CallLog = field(default_factory=CallLog)  # (call number, model, node [B, W], attended [B, W], n) per call
    calls: int = 0
    hashes: torch.Tensor | None = None  # [B, T + n] the slot hashes of the call being read
    carried: dict = field(default_factory=dict)  # model -> its last call's Chains, with the hashes and labels of every slot
    stream: Stream = field(default_factory=Stream)  # what each fed token was to the target (C1's third clause)
    #: model -> Columns of its chains' (rank, token, before, node) and of their labels (History._inputs)
    columns: dict = field(default_factory=dict)

    def first_built_on(self, wrong: int, after: int):
        """``(call number, model)`` of the first logged call after call ``after`` that
        builds on chain hash ``wrong`` as on a committed token: its chain holds
        ``wrong``, and either no call up to ``after`` had fed it (it was made up
        after the target chose otherwise) or this call feeds it to a model that
        had been fed it before (a draft re-fed as the newest committed token). A
        call that only continues drafts fed before ``after`` (a catch-up over a
        rejected branch) is speculation, not a wrong call."""
        fed: dict = {}  # model -> call numbers that fed ``wrong``
        for number, model, node, attended, n in self.log:
            inputs = node[:, node.shape[1] - n:][attended[:, node.shape[1] - n:]]
            feeds = bool((inputs == wrong).any())
            if number > after and bool((node[attended] == wrong).any()):
                made_up = not any(c <= after for calls in fed.values() for c in calls)
                if made_up or (feeds and fed.get(model)):
                    return number, model
            if feeds:
                fed.setdefault(model, []).append(number)
        return None

    def first_off_stream(self, prompt: int, verified: int, after: int):
        """``(call number, model)`` of the first logged call after call ``after`` with
        a row whose chain holds chain hash ``prompt`` but not ``verified`` (a
        longer chain through it): a row that dropped part of its stream. Target
        calls only: a draft call may lag the stream and run ahead of it at will."""
        for number, model, node, attended, _n in self.log:
            if number <= after or model != "target":
                continue
            held = torch.where(attended, node, 0)
            if bool(((held == prompt).any(1) & ~(held == verified).any(1)).any()):
                return number, model
        return None

    def read(self, call: ForwardCall, hashes: torch.Tensor | None) -> Chains:
        """The call as chains, reading the labels of the cached slots it could
        attend from ``hashes`` ``[B, T + n]``, the content hashes of the stream's
        columns in the model's full-attention layers *after* the call (calls only
        append, so columns ``0 .. T-1`` are as the call saw them).

        When every cached slot holds what this model's previous call saw or
        wrote there and the mask over them is that call's, the context is that
        call's chain, already checked: only the inputs are new (``checked``)."""
        self.calls += 1
        ids, t = call.input_ids, call.cache_length
        device = ids.device
        attended = on(call.attention_mask, device) != 0  # [B, T + n]
        self.hashes = hashes
        before = self.carried.get(call.model)
        same = False  # every cached slot holds what it held after this model's previous call
        if t and before is not None:
            held = on(self.hashes[:, :t], device)
            was = head(before.hashes, t)  # (head: no slice when the previous call's width is T)
            same = before.hashes.shape[0] == ids.shape[0] and before.hashes.shape[1] >= t \
                and (same_view(held, was) or torch.equal(held, was))
            if same and torch.equal(attended[:, :t], head(before.attended, t)):
                return self._inputs(call, attended, before, t)
        rank, checked, marks = attended.cumsum(1) - 1, 0, None
        if t and before is not None:
            moved = self._moved(call, attended, before, held, rank)
            if moved is not None:
                return moved
        if same:  # only the mask changed (holes): the slots' labels are the previous call's, unchecked
            context = before.labels()[:, :t]
            # up to the first slot whose mask changed, the chain is the previous call's, checked then
            changed = (attended[:, :t] != before.attended[:, :t]).any(0).nonzero()
            checked = int(changed[0]) if changed.numel() else t
            listed = few_changed(self, call, attended, before, t, checked, context) if checked < t else None
            if listed is not None:
                return listed
            marks = self.marks(before, checked)
            # slots the previous call did not attend carry no label read then: look up those attended now
            missing = attended[:, :t] & (context[..., 3] == UNWRITTEN)
            if bool(missing.any()):
                context = context.clone()
                context[missing] = self.labels.lookup(held[missing])
        else:
            context = self._context(call.model, on(self.hashes[:, :t], device), attended[:, :t]) if t else \
                torch.zeros((ids.shape[0], 0, 4), dtype=torch.int64, device=device)  # [B, T, 4]
        token = torch.cat([context[..., 0], ids], 1)
        weights = self.hasher.weight_table(attended.shape[1], device)
        contrib = (token + 1) * torch.take(weights, rank.clamp(min=0)) * attended  # (take: a 1-D gather)
        node = contrib.cumsum(1)
        return Chains(self.calls, call, attended, rank, token, node - contrib, node, self, checked=checked,
                      _context=context, _marks=marks)

    @staticmethod
    def marks(before: Chains, upto: int):
        """What :meth:`Stream.attended` carries into a call whose first ``upto`` cached slots
        are elements of ``before``'s chain: ``before``'s rejected slots, ``upto``, how many
        nodes had been rejected then, and the nodes ``before`` fed."""
        if before._rejected is None or before._fed is None:
            return None
        return before._rejected, upto, before._marked, before._fed

    def _moved(self, call: ForwardCall, attended: torch.Tensor, before: "Chains", held: torch.Tensor,
               ranks: torch.Tensor):
        """The chains of a call whose rows attend, with no hole, a prefix of what they
        attended at this model's previous call, wherever the slots now sit (a
        realignment, a crop, a rebuilt cache): that chain was checked then, and
        its labels are carried by rank. None when some row attends anything else.
        ``ranks`` ``[B, T + n]``: ``attended.cumsum(1) - 1``."""
        t = held.shape[1]
        att = attended[:, :t]
        rank = ranks[:, :t]  # [B, T]
        if not torch.equal(rank >= 0, att):  # (rank >= 0: the chain has begun at or before the slot)
            return None  # a hole after the chain began: the full check (C1's hidden slots)
        width, previous = before.hashes.shape[1], before.hashes.shape[0]
        slot = torch.where(before.attended, before.rank, width)  # [B', W]: each element's rank, the rest to a spare
        by_rank = held.new_full((previous, width + 1), -1).scatter(1, slot, before.hashes)  # [B', W + 1]
        at = rank.clamp(0, width)
        rows, checked = self._rows(by_rank, held, att, at)
        if rows is None and not checked:
            return None
        tokens = held.new_full((previous, width + 1), -1).scatter(1, slot, before.token)
        if rows is not None:  # (None: the batch kept its rows, each continues itself)
            tokens = tokens[rows]
        token = torch.cat([torch.where(att, tokens.gather(1, at), -1), call.input_ids], 1)
        weights = self.hasher.weight_table(token.shape[1], token.device)
        contrib = (token + 1) * torch.take(weights, ranks.clamp(min=0)) * attended
        node = contrib.cumsum(1)
        return Chains(self.calls, call, attended, ranks, token, node - contrib, node, self, checked=t,
                      source=Moved(before, slot, at, att, rows), depth=link(before),
                      _marks=self.marks(before, t), moved_from=(before.node, rows))

    @staticmethod
    def _rows(by_rank: torch.Tensor, held: torch.Tensor, att: torch.Tensor, at: torch.Tensor):
        """Which row of the previous call each row continues, compared in full: itself when
        the batch kept its rows (``(None, True)``); else the first row whose chain holds each
        slot this row attends at its rank, among those holding its last one there (two rows
        can hold one content at a rank: a shared prefix, or attention that gives far tokens
        no weight): ``(rows [B], False)``; ``(None, False)`` when some row continues none."""
        b = held.shape[0]
        if by_rank.shape[0] == b and _holds(by_rank, at, att, held):
            return None, True
        last = torch.where(att, at, -1).max(1).values  # [B] the last attended rank (-1: none)
        key = held.gather(1, torch.where(att, torch.arange(att.shape[1], device=att.device), -1).max(1, keepdim=True)
                          .values.clamp(min=0))[:, 0]  # [B] the content of each row's last attended slot
        match = by_rank[:, last.clamp(min=0)] == key[None, :]  # [B', B]
        rows = match.long().argmax(0)  # [B]: the first previous row holding each row's last attended slot
        fits = (torch.where(att, by_rank[rows].gather(1, at), held) == held).all(1) | (last < 0)  # [B]
        for i in (~fits).nonzero().flatten().tolist():  # (rare: the next candidates, one row at a time)
            was = [j for j in match[:, i].nonzero().flatten().tolist()
                   if _holds(by_rank[j, None], at[i, None], att[i, None], held[i, None])]
            if not was:
                return None, False
            rows[i] = was[0]
        return rows, False

    def _inputs(self, call: ForwardCall, attended: torch.Tensor, before: "Chains", t: int) -> Chains:
        """The chains of a call whose context is the previous call's (see :meth:`read`):
        the carried chain up to slot ``T``, extended by the inputs, appended to this
        model's :class:`~batchspec.invariants.columns.Columns` (in place when the
        call appends to the previous call's columns: work in what the call feeds)."""
        ids, fed = call.input_ids, attended[:, t:]
        every = bool(fed.all())
        listed = few(self, call, attended, before, t) if every else None
        if listed is not None:
            return listed
        b, n = ids.shape
        weights = self.hasher.weight_table(t + ids.shape[1], ids.device)
        rank_in = before.rank[:, t - 1: t] + fed.cumsum(1)  # [B, n]
        # every input attended (the common case): every rank is an element's, nothing to mask
        contrib = (ids + 1) * torch.take(weights, rank_in) if every else \
            (ids + 1) * torch.take(weights, rank_in.clamp(min=0)) * fed
        node_in = before.node[:, t - 1: t] + contrib.cumsum(1)
        cols = self.columns_of(call.model)
        # rank, token, before and node as one [B, T + n, 4] column each: one append, not four
        quad, new = cols[0].reserve(before.elements(t), b, n, (4,), rank_in.dtype, rank_in.device)
        torch.stack([rank_in, like(ids, rank_in), node_in - contrib, node_in], -1, out=new)  # (written in place)
        chains = Chains(self.calls, call, attended, *quad.unbind(-1), self, checked=t,
                        _marks=self.marks(before, t), quad=quad, _every=every, extends=before.node)
        chains._labels, new = cols[1].reserve(head(before.labels_in(cols[1]), t), b, n, (4,), torch.int64, ids.device)
        chains.written(out=new)
        chains._context = chains._labels[:, :t]
        return chains

    def columns_of(self, model: str) -> tuple:
        """This model's two :class:`~batchspec.invariants.columns.Columns`: chain elements, labels."""
        cols = self.columns.get(model)
        if cols is None:
            cols = self.columns[model] = (Columns(), Columns())
        return cols

    def _context(self, model: str, hashes: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Labels ``[B, T, 4]`` of the cached slots with these content hashes: carried
        from this model's previous call, whose cache held the same content
        somewhere (the common case: calls only append; after a realignment or
        a finished row, content moved), read from the label table for the
        attended rest (a new cache, rows from another batch); unattended slots
        not carried read as unwritten. A carried label is one writer's: a
        violation is confirmed against the table before it is reported."""
        carried = self.carried.get(model)
        b, t = hashes.shape
        if carried is None:
            label = UNREAD.to(hashes.device).expand(b, t, 4).clone()
        else:  # find each slot's content among what this model's cache held after its last call
            held, labels = carried.hashes.flatten(), carried.labels().reshape(-1, 4)
            first = (labels[:, 3] == UNWRITTEN).to(torch.uint8).argsort(stable=True)  # labelled copies first
            held, labels = held[first], labels[first]
            ordered, order = held.sort(stable=True)
            at = torch.searchsorted(ordered, hashes.contiguous()).clamp(max=held.numel() - 1)  # [B, T]
            label = labels[order[at]]
            label[ordered[at] != hashes] = UNREAD.to(label.device)
        missing = attended & (label[..., 3] == UNWRITTEN)  # attended, and not carried or never read
        if bool(missing.any()):
            label = label.clone()
            label[missing] = self.labels.lookup(hashes[missing])
        return label

    def remember(self, chains: Chains) -> None:
        """After the predicates: label the slots the call wrote, log the call's chains,
        and, for the target, what it chose (Spec §3.12.3)."""
        call = chains.call
        if self.hashes is not None:
            chains.hashes = on(self.hashes, chains.token.device)
            self.labels.write(chains)  # labelled in the table when a look-up first needs it
            self.carried[call.model] = chains
        # the attended inputs as lists, read once: the log, the choices and the stream memo read them
        rows, columns = fed_inputs(chains)
        chains._fed = columns[0]
        self.log.append(chains.number, call.model, chains.node, chains.attended, call.input_ids.shape[1],
                        chains.extends, chains.moved_from, (columns[0], columns[3]) if chains.every else None,
                        chains.checked if chains.clean else None)
        chains.extends = chains.moved_from = None
        if call.model == "target" and call.logits is not None:
            self._choices(chains)
        self.stream.remember(chains, self.chosen, rows, columns)
        if call.logits is not None:  # the choices are read: the chains, carried on, keep no [B, n, V] logits
            chains.call = call.without_logits()

    def _choices(self, chains: Chains) -> None:
        """Record the target's next-token choice after every input its logits cover
        (the last ``kept`` inputs, for a call that trims its logits)."""
        covered = chains.choices()
        for node, chose in zip(*covered) if covered else ():
            self.chosen.setdefault(node, {}).setdefault(chose, chains.number)


def _holds(by_rank: torch.Tensor, at: torch.Tensor, att: torch.Tensor, held: torch.Tensor) -> bool:
    """Every attended slot holds the content ``by_rank`` ``[B, W + 1]`` has at its rank
    ``at`` ``[B, T]`` (unattended slots compared with themselves)."""
    return torch.equal(torch.where(att, by_rank.gather(1, at), held), held)
