"""The EXSPEC pool and its two moves: form a batch, release it (Spec §8.1, §8.3).

Every active sequence is a :class:`Member`: its committed tokens and its own
caches, unpadded and ragged between rounds — the layout of Spec §2.3 at
``B = 1`` (``c_i`` tokens, ``c_i - 1`` cached slots). A round stacks some
members into one left-padded :class:`BatchState` and, after verification,
splits it back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import torch

from ..invariants.observation import CacheView, Observation
from .rows import Row, split, stack
from .exspec_policy import Candidate
from .state import BatchState, RowOutput, left_pad


@dataclass(eq=False)  # members are compared by identity
class Member:
    """One active sequence of the window."""

    request: int
    tokens: torch.Tensor  # [c_i] prompt + generated
    prompt_length: int
    target_kv: Row  # c_i - 1 slots, every layer in one tensor
    draft_kv: Row | None
    output: RowOutput = field(default_factory=RowOutput)
    idle: int = 0  # rounds since it was last in a batch

    batch = 1  # a member observed on its own is a batch of one

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.tokens.numel(), self.idle)

    def observation(self, round_: int) -> Observation:
        """The member as the invariants see it: one unpadded row (Spec §3)."""
        caches = {"target": CacheView(self.target_kv.layers(), self.target_kv.stacked())}
        if self.draft_kv is not None:
            caches["draft"] = CacheView(self.draft_kv.layers(), self.draft_kv.stacked())
        c = self.tokens.numel()
        return Observation(round_, "realign", self.tokens[None], torch.ones_like(self.tokens)[None], [0], [c],
                           caches, requests=[self.request])


def _copy(member: Member) -> Member:
    """``member`` with its own output list; the tensors are shared (see :meth:`Pool.snapshot`)."""
    return replace(member, output=RowOutput(list(member.output.tokens), member.output.stop))


@dataclass(frozen=True)
class PoolSnapshot:
    """What :meth:`Pool.snapshot` saved: every field of the pool, members copied."""

    queue: tuple  # (request, prompt)
    window: tuple  # Member copies, in admission order
    round: int


@dataclass
class Pool:
    """Prompts not yet admitted (FIFO) and the window of at most ``W``
    members, in admission order (Spec §8.1)."""

    batch_size: int  # B
    window_size: int  # W >= B
    queue: deque = field(default_factory=deque)  # (request, prompt)
    window: list[Member] = field(default_factory=list)
    round: int = 0
    # The last formed batch's (target, draft) caches: storage the next batch overwrites (:func:`~.rows.stack`),
    # every slot it reads written or zeroed first. Scratch, not state: snapshot() does not save it.
    # Dropped when the pool empties, so an idle pool holds no batch.
    storage: tuple = (None, None)

    @property
    def active(self) -> bool:
        """Some request is queued or decoding."""
        return bool(self.queue or self.window)

    def submit(self, request: int, prompt: list[int]) -> None:
        self.queue.append((request, list(prompt)))

    def snapshot(self) -> PoolSnapshot:
        """Everything a round may change, so that :meth:`restore` can undo it (Spec §8.6).

        Contract (keep it when the pool grows a field): ``restore(snapshot())``
        after any partial or complete round leaves the pool observably equal
        to the pool at ``snapshot()`` — the same queue, the same members in
        the same order with equal tokens, caches, outputs and idle counts, the
        same round counter, and the same value of any field added later (a
        batch kept across rounds included; ``storage`` is scratch and
        excepted). Members are copied and their output lists with them;
        their tensors are shared, which is valid because no move of the pool
        writes a slot a member reads: ``form`` copies members' slots into
        the batch, and ``release`` gives a member that grew a new
        :class:`~.rows.Row` whose new slots lie past the old Row's length,
        written in place only while no longer Row over that storage exists
        (else copied), so no snapshot's member, however snapshots are
        restored, sees its slots change. A move that writes live slots in
        place must have them cloned here. Cost: one list copy per member, no
        tensor copy.
        """
        return PoolSnapshot(tuple(self.queue), tuple(_copy(m) for m in self.window), self.round)

    def restore(self, snapshot: PoolSnapshot) -> None:
        """Put back the state of ``snapshot`` (Spec §8.6). The snapshot stays
        valid: members are copied again, so it can be restored twice."""
        self.queue = deque(snapshot.queue)
        self.window = [_copy(m) for m in snapshot.window]
        self.round = snapshot.round

    def admit(self) -> list[tuple[int, list[int]]]:
        """The prompts that enter the window now: one per free place."""
        return [self.queue.popleft() for _ in range(min(self.window_size - len(self.window), len(self.queue)))]

    def withdraw(self, requests) -> dict[int, Member]:
        """Take ``requests`` out of the queue and the window between rounds (a
        request cancelled, or cut by a caller's stop rule); the window members
        taken, by request, for their outputs."""
        taken = {m.request: m for m in self.window if m.request in requests}
        self.queue = deque(q for q in self.queue if q[0] not in requests)
        self.window = [m for m in self.window if m.request not in requests]
        return taken

    def waiting(self, chosen: list[Member]) -> list[int]:
        """Requests queued or in the window but not in ``chosen``."""
        return [r for r, _ in self.queue] + [m.request for m in self.window if m not in chosen]

    def settle(self, chosen: list[Member], released: list[Member]) -> None:
        """After a round: a chosen member is replaced by its released self,
        keeping its place and output, or leaves when it finished (it is not in
        ``released``); the others waited one more round."""
        back = {m.request: m for m in released}
        kept = []
        for member in self.window:
            if member not in chosen:
                member.idle += 1
            elif member.request in back:
                back[member.request].output = member.output
                member = back[member.request]
            else:
                continue
            kept.append(member)
        self.window = kept


def form(models, members: list[Member], round_: int, reuse: tuple = (None, None)) -> tuple[BatchState, bool]:
    """Stack members into one batch (Spec §8.3). Returns ``(state, realigned)``.

    ``reuse``: the previous batch's ``(target, draft)`` caches, whose storage
    this batch overwrites when it is large enough (:func:`~.rows.stack`).

    Equal lengths (Paper §4, Corollaries B.2/B.3): the members are stacked as
    they are — no padding change, no position recompute, no cache shift.
    Otherwise the fallback is EQSPEC's layout: left-pad every row to the
    longest, ``p_i = L - c_i``, and shift its caches by ``δ_i = p_i``.
    """
    length = torch.tensor([m.tokens.numel() for m in members], device=members[0].tokens.device)  # [B] c_i
    pad = int(length.max()) - length  # [B] p_i
    realigned = bool(pad.any())
    if realigned:
        tokens = left_pad([m.tokens.tolist() for m in members], length.device)[0]  # [B, L]
    else:
        tokens = torch.stack([m.tokens for m in members])  # [B, L]
    p = pad.tolist()
    target = stack(models.target, [m.target_kv for m in members], p, reuse[0])
    draft = stack(models.draft, [m.draft_kv for m in members], p, reuse[1]) if models.draft is not None else None
    prompt_length = torch.tensor([m.prompt_length for m in members], device=length.device)
    return BatchState(tokens, pad, length, [m.request for m in members], prompt_length, target, draft,
                      round_), realigned


def release(state: BatchState, grid: torch.Tensor, length: list[int], rows: list[int]) -> list[Member]:
    """Split rows ``rows`` of a batch back into unpadded members (Spec §8.3).

    Row ``b`` keeps its first ``length[b]`` content tokens of ``grid`` ``[B,
    ≥ p_b + length[b]]`` (the token grid, or the grid extended by the round's
    proposals) and cache slots ``p_b .. p_b + length[b] - 2``. No shift:
    after verification the rows go back to the pool unaligned.
    """
    pad = state.pad.tolist()
    spans = [(b, pad[b], pad[b] + length[b] - 1) for b in rows]
    target = split(state.target_cache, spans)
    draft = split(state.draft_cache, spans) if state.draft_cache is not None else [None] * len(rows)
    return [Member(state.requests[b], grid[b, pad[b]:pad[b] + length[b]], int(state.prompt_length[b]),
                   target[j], draft[j]) for j, b in enumerate(rows)]
