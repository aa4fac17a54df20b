"""The masking baseline, BSP-style: never move anything, mask the rejects (Spec §6.1).

Each round every row grows by ``A = max_i a_i`` slots: its accepted drafts,
then the rejected drafts that fill it up to ``A`` (they stay in the grid and
in both caches, zeroed in the attention mask), then its bonus token in the
last slot. Nothing is shifted, which is the point of the approach; position
ids keep counting slots (``s - p_i``), so after a hole they run ahead of the
row's content. While every row accepts the same number (always at ``B = 1``)
there are no holes and the output is exact; the first ragged round punches a
hole (I1, Spec §3.1), the next call feeds positions past it (I2, Spec §3.2),
and the output drifts.
"""

from __future__ import annotations

import torch

from .. import acceptance
from ..eqspec import Event, RoundRecord
from ..moves import crop_to
from . import grid as g


def _call_mask(grid: g.Grid, upto: int) -> torch.Tensor:
    """The held mask (holes included), then ones for the round's inputs: ``[B, upto]``."""
    extra = grid.mask.new_ones((grid.batch, max(0, upto - grid.width)))
    return torch.cat([grid.mask, extra], dim=1)[:, :upto]


def _held_mask(grid: g.Grid) -> torch.Tensor:
    slots = torch.arange(grid.width, device=grid.pad.device)
    return (slots[None, :] >= grid.pad[:, None]).long()  # [B, S], no holes yet


LAYOUT = g.Layout(mask=_call_mask, positions=g.slots_minus_pad, held_mask=_held_mask)


def masking_round(models, grid: g.Grid, config, outputs):
    """One round; the steps mirror EQSPEC's (Spec §4.7) except step 5."""
    grid.round += 1
    budget = config.max_new_tokens - grid.generated  # [B]
    k = min(config.k.k_max, int(budget.min()))  # a Fixed(k): the methods that take no other policy
    # 1. Draft k' tokens per row.
    drafts = grid.tokens.new_zeros((grid.batch, 0))
    for _ in range(k):
        calls: list = []
        drafts = g.draft_one(models, grid, drafts, LAYOUT, calls)
        yield g.event("draft", "draft", grid, calls, drafts)
    # 2. Verify; acceptance and bonus are the target's (this baseline gets that right).
    calls = []
    logits = g.verify(models, grid, drafts, LAYOUT, calls)  # [B, k'+1, V]
    verdict = acceptance.greedy(drafts, logits)
    a, eos_hit, finished = acceptance.commit_counts(verdict, budget, config.eos)
    committed = g.commit(outputs, grid, verdict.proposal, a, eos_hit, finished)
    yield g.event("verify", "verify", grid, calls, drafts, committed=committed)
    stay = (~finished).nonzero().flatten()  # [B']
    grow = int(a[stay].max()) if stay.numel() else 0  # A
    # 3. The last draft's key/value is kept when some staying row uses all k' + 1 slots.
    if k and grow == k + 1:
        calls = []
        g.catch_up(models, grid, drafts, LAYOUT, calls)
        yield g.event("draft", "draft", grid, calls, drafts)
    record = RoundRecord(grid.round, list(grid.requests), k, verdict.accepted_drafts.tolist(), a.tolist(),
                         grid.width + grow, stay.numel() < grid.batch)
    if not stay.numel():
        grid.tokens = grid.tokens[:0]
        yield Event("realign", "finish", grid, [], None, record)
        return
    # 4. Append A slots per row, moving nothing: drafts d_1..d_{A-1} (those past m_i are
    #    rejected: kept in the grid and the caches, zeroed in the mask), then the bonus.
    bonus = verdict.proposal.gather(1, verdict.accepted_drafts[:, None])  # [B, 1]
    slot = torch.arange(grow - 1, device=a.device)[None, :]  # [1, A-1]
    kept = (slot < verdict.accepted_drafts[:, None]).long()  # [B, A-1]
    grid.tokens = torch.cat([grid.tokens, drafts[:, : grow - 1], bonus], dim=1)  # [B, S + A]
    grid.mask = torch.cat([grid.mask, kept, torch.ones_like(bonus)], dim=1)  # [B, S + A]
    grid.length = grid.length + a
    cached = grid.width - 1  # every fed slot up to the bonus keeps its key/value
    if stay.numel() < grid.batch:
        g.keep_rows(grid, stay, torch.arange(cached, device=a.device).expand(stay.numel(), cached))
    else:
        for cache in (grid.target_cache, grid.draft_cache):
            crop_to(cache, cached)
    yield g.event("realign", "realign", grid, [], record=record)


#: ``decode(models, prompts, requests, config)``: one batch the masking way.
decode = g.decoder(LAYOUT, masking_round)
