"""The DSD-style baseline: no mask, padding that only grows, the draft's bonus (Spec §6.3).

Three departures from EQSPEC, each one a bug the invariants name:

* **no attention mask**: every call attends every slot, padding included,
  and position ids are slot indices, so padding is counted as positions
  (I1, Spec §3.1, as soon as any row is padded);
* **repad without unpadding**: after a round each row is left-padded by
  ``A - a_i`` more slots (``A = max_i a_i``) and its caches shifted right to
  match; padding never goes away, it accumulates;
* **the bonus from the draft**: the draft proposes ``k' + 1`` tokens, the
  target accepts the longest agreeing prefix of the first ``k'``, and the
  token after it is the draft's, not the target's (I5, Spec §3.5). At a
  rejection that is the very draft the target just rejected, so DSD fails at
  the first rejection even at ``B = 1``.
"""

from __future__ import annotations

import torch

from .. import acceptance
from ..acceptance import Verdict
from ..eqspec import Event, RoundRecord
from ..state import FILLER
from . import grid as g


def _no_mask(grid: g.Grid, upto: int) -> torch.Tensor:
    return grid.pad.new_ones((grid.batch, upto))  # [B, upto]: every slot attended


def _slot_positions(grid: g.Grid, start: int, n: int) -> torch.Tensor:
    slots = torch.arange(start, start + n, device=grid.pad.device)
    return slots[None, :].expand(grid.batch, n)  # [B, n]: padding counted as positions


LAYOUT = g.Layout(mask=_no_mask, positions=_slot_positions, held_mask=lambda grid: _no_mask(grid, grid.width))


def dsd_round(models, grid: g.Grid, config, outputs):
    """One round (compare Spec §4.7 step by step)."""
    grid.round += 1
    budget = config.max_new_tokens - grid.generated  # [B]
    k = min(config.k.k_max, int(budget.min()))  # a Fixed(k): the methods that take no other policy
    # 1. The draft proposes k' + 1 tokens: k' to verify, and its own candidate for the bonus.
    drafts = grid.tokens.new_zeros((grid.batch, 0))
    for _ in range(k + 1):
        calls: list = []
        drafts = g.draft_one(models, grid, drafts, LAYOUT, calls)
        yield g.event("draft", "draft", grid, calls, drafts)
    # 2. The target verifies the first k'; the token after the accepted ones is the draft's.
    calls = []
    logits = g.verify(models, grid, drafts[:, :k], LAYOUT, calls)  # [B, k'+1, V]
    accepted = acceptance.greedy(drafts[:, :k], logits).accepted_drafts  # [B] m_i
    verdict = Verdict(accepted, drafts)  # proposal [B, k'+1]: d_1 .. d_{m_i}, then d_{m_i+1}
    a, eos_hit, finished = acceptance.commit_counts(verdict, budget, config.eos)
    committed = g.commit(outputs, grid, drafts, a, eos_hit, finished)
    yield g.event("verify", "verify", grid, calls, drafts[:, :k], committed=committed)
    stay = (~finished).nonzero().flatten()  # [B']
    grow = int(a[stay].max()) if stay.numel() else 0  # A
    shift = (grow - a)[stay]  # [B'] extra left padding per staying row
    record = RoundRecord(grid.round, list(grid.requests), k, accepted.tolist(), a.tolist(),
                         grid.width + grow, bool(shift.any()) or stay.numel() < grid.batch)
    if not stay.numel():
        grid.tokens = grid.tokens[:0]
        yield Event("realign", "finish", grid, [], None, record)
        return
    # 3. Repad without unpadding: new slot s of row i is old slot s - (A - a_i), caches too.
    width = grid.width + grow
    source = torch.arange(width, device=a.device)[None, :] - shift[:, None]  # [B', S + A]
    extended = torch.cat([grid.tokens, drafts], dim=1)[stay]  # [B', S + k' + 1]
    tokens = extended.gather(1, source.clamp(min=0))
    g.keep_rows(grid, stay, source[:, : width - 1].clamp(min=0))  # [B', S + A - 1] cache slots
    grid.pad, grid.length = grid.pad + shift, grid.length + a[stay]
    grid.tokens = torch.where(source < 0, FILLER, tokens)
    grid.mask = _no_mask(grid, width)
    yield g.event("realign", "realign", grid, [], record=record)


#: ``decode(models, prompts, requests, config)``: one batch the dsd way.
decode = g.decoder(LAYOUT, dsd_round)
