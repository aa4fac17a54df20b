"""I6 cache provenance and I7 committed stream: the checks that need the ledger (Spec §3.6, §3.7)."""

from __future__ import annotations

import torch

from ._util import on, reporter, where_wrong
from .ledger import TOLERANCE, UNWRITTEN, Ledger, fingerprints
from .memo import Memo
from .observation import Observation
from .violation import Violation


def cache_provenance(obs: Observation, ledger: Ledger | None = None, memo: Memo | None = None) -> list[Violation]:
    """Every committed slot of every cache holds the key written for the token
    that lives there (Spec §3.6).

    For row ``i`` and each grid slot ``s < L - 1`` the grid mask attends,
    content index ``j = cumsum(mask)[s] - 1`` and token ``x = tokens[i, s]``:

    * some forward call fed ``x`` at content index ``j`` of this request
      (else the cache cannot hold its key: a dropped, shifted or foreign slot);
    * the slot's fingerprint (:func:`~batchspec.invariants.ledger.fingerprints`)
      equals the one recorded when that call wrote it, within
      :data:`~batchspec.invariants.ledger.TOLERANCE` (a slot moved to the wrong
      row or offset, or left behind by a realignment, holds another key).

    Checked for both models at every boundary step, where a realignment
    rewrites the caches (between boundaries the calls only append, and every
    slot they write is fingerprinted); needs no fresh forward. Off (``[]``)
    without a ledger: the structural mode.
    """
    if ledger is None or not obs.boundary:
        return []
    report = reporter(obs, "I6", "cache_provenance")
    need = obs.width - 1
    requests = ledger.requests(obs)
    out: list[Violation] = []
    live = obs.mask[:, :need] != 0  # [B, L - 1]
    grid = (live, live.cumsum(1) - 1, obs.tokens[:, :need])  # attended, content index, token
    for model, view in obs.caches.items():
        table = ledger.tables.get(model)
        span = min(need, view.length)
        if table is None or span == 0 or not view.layers or view.layers[0][0].shape[0] != len(requests):
            continue  # nothing written yet, or a shape I3 reports
        held, index, tokens = grid if span == need else (t[:, :span] for t in grid)  # [B, span]
        held, now, then = _read(table, requests, view, held, index, tokens, memo)
        # the statement: every live slot holds what was written for its token at its content index
        if not _as_written(held, now, then):
            out.extend(_violations(report, model, held, now, then))
    return out


def _as_written(live, now, then) -> bool:
    """No live slot is :func:`_stale`: one exact comparison first (a slot that was
    only copied usually keeps its fingerprint bit for bit), the tolerance only
    when that fails."""
    return torch.equal(torch.where(live[..., None], now, then), then) or not bool(_stale(live, now, then).any())


def _read(table, requests, view, held, index, tokens, memo: Memo | None = None) -> tuple:
    """``(held, now, then)`` over the first ``span = index.shape[1]`` slots: the live
    slots (on the table's device), their fingerprints and tokens as the cache
    holds them now, and as they were written at their content index."""
    rows = table.index(requests)  # [B, 1]; first: a request never written grows the table
    table.grow(len(table.rows), index.shape[1])  # then every index < span is a column (-1: the spare one)
    then = table.entries[rows, on(index, rows.device)]  # [B, span, 3]: 2 fingerprints, the token
    now = fingerprints(view, 0, index.shape[1], tokens, memo)  # [B, span, 3]
    return on(held, then.device), now, then  # the grid may live on another device than the cache


def _violations(report, model, live, now, then) -> list[Violation]:
    """One violation per row with a :func:`_stale` slot, at its first."""
    return [_explain(report, model, i, slot, int(live[i, : slot + 1].sum()) - 1, now[i], then[i])  # j unclamped
            for i, slot in where_wrong(_stale(live, now, then))]


def _stale(live, now, then) -> torch.Tensor:
    """``[B, span]``: live slots whose fingerprints are not within :data:`TOLERANCE`
    (relative; NaN never is, equal values always are) of what was written, or
    whose token differs."""
    tol = TOLERANCE.get(then.dtype, 1e-4)
    now_, then_ = now[..., :2], then[..., :2]
    close = ((now_ == then_) | ((now_ - then_).abs() <= tol * (1 + then_.abs()))).all(-1)  # [B, span]
    return live & ~(close & (now[..., 2] == then[..., 2]))


def stale_slots(obs: Observation, ledger: Ledger, model: str) -> torch.Tensor | None:
    """``[B, span]`` bool, ``span = min(L - 1, T)``: the slots of ``model``'s cache
    that I6 rejects in ``obs`` (live, and not holding the key written there for
    their token); None when the ledger holds nothing for ``model``. For pictures
    and reports: :func:`cache_provenance` is the check."""
    view, table = obs.caches.get(model), ledger.tables.get(model)
    span = min(obs.width - 1, view.length if view is not None else 0)
    if table is None or span == 0:
        return None
    live = obs.mask[:, :span] != 0
    return _stale(*_read(table, ledger.requests(obs), view, live, live.cumsum(1) - 1, obs.tokens[:, :span]))


def _explain(report, model, row, slot, j, now, then) -> Violation:
    """The violation of ``row``'s first bad ``slot`` (content index ``j``)."""
    x, written = int(now[slot, 2]), int(then[slot, 2])
    if written == UNWRITTEN:
        return report(row, f"key of token {x} at content index {j}", "no write",
                      f"slot {slot} (content index {j}) should hold the key of token {x}, but no forward "
                      "call fed that token there", model)
    if written != x:
        return report(row, f"key of token {x} at content index {j}", f"written token {written}",
                      f"slot {slot} (content index {j}) holds the key written for token {written}", model)
    return report(row, [round(float(v), 6) for v in then[slot, :2]], [round(float(v), 6) for v in now[slot, :2]],
                  f"slot {slot} (content index {j}, token {x}) holds another key than the one the forward "
                  "call wrote for it (moved, shifted or overwritten)", model)


def committed_stream(obs: Observation, ledger: Ledger | None = None) -> list[Violation]:
    """At a boundary, each row's content is its content at the committing step
    plus exactly the tokens that step committed (Spec §3.7).

    This is what makes ``committed`` (read by I5) a checked claim rather than a
    self-report: a decoder that appends a token other than the one I5
    verified is caught here. When a recorder derived ``committed`` from the
    target's logits (``ledger.derived``), a prefix of it is accepted: the
    decoder may cut at an EOS or a budget the calls do not show. Off (``[]``)
    without a ledger.
    """
    if ledger is None or not obs.boundary:
        return []
    report = reporter(obs, "I7", "committed_stream")
    out: list[Violation] = []
    requests = ledger.requests(obs)
    if not any(r in ledger.pending for r in requests):
        return out
    for i, (r, now) in enumerate(zip(requests, obs.live_contents())):
        if r not in ledger.pending:
            continue
        before, committed = ledger.pending[r]
        gained = now[len(before):] if now[:len(before)] == before else None  # None: the content before changed
        # the statement: content now = content before + committed (derived commits: a prefix of them)
        if gained == committed or (ledger.derived and gained is not None and gained == committed[:len(gained)]):
            continue
        out.append(report(i, committed, now if gained is None else gained,
                          "the grid did not gain exactly the committed tokens"
                          + ("" if gained is not None else " (its earlier content changed)")))
    return out
