"""The one place where acceptance is decided (Spec §4.3).

Greedy verification now; speculative sampling plugs in here (Spec §4.3.2)
with the draft distributions the draft step keeps per drafted token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Verdict:
    """Outcome of verifying one round of drafts."""

    accepted_drafts: torch.Tensor  # [B] m_i, leading drafts the target agrees with
    proposal: torch.Tensor  # [B, k'+1]: drafts[:m_i], then the bonus token at m_i


def greedy(drafts: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Greedy acceptance (Spec §4.3.1).

    ``drafts``: ``[B, k']``; ``target_logits``: ``[B, k'+1, V]``, the target's
    prediction after the newest token and after each draft. ``m_i`` is the
    length of the longest prefix where the draft equals the target's argmax;
    the bonus token is the target's argmax at the first disagreement, or after
    the last draft when all ``k'`` were accepted (the authors' code dropped
    that one).
    """
    choice = target_logits.argmax(-1)  # [B, k'+1]
    k = drafts.shape[1]
    agree = (drafts == choice[:, :k]).long()  # [B, k']
    accepted = agree.cumprod(1).sum(1)  # [B]
    slot = torch.arange(k + 1, device=drafts.device)[None, :]  # [1, k'+1]
    padded = torch.cat([drafts, choice[:, k:]], dim=1)  # [B, k'+1]
    bonus = choice.gather(1, accepted[:, None])  # [B, 1]
    proposal = torch.where(slot < accepted[:, None], padded, bonus)
    return Verdict(accepted, proposal)


def commit_counts(verdict: Verdict, budget: torch.Tensor, eos: torch.Tensor | None):
    """``a_i`` after stopping rules, and whether each row finishes (Spec §4.6).

    A row keeps ``m_i + 1`` tokens, cut after its first EOS (the EOS is kept)
    and at its remaining budget ``budget`` ``[B]``. Returns ``(a [B], eos_hit
    [B] bool, finished [B] bool)``.
    """
    proposal = verdict.proposal  # [B, k'+1]
    width = proposal.shape[1]
    a = verdict.accepted_drafts + 1
    eos_hit = torch.zeros_like(a, dtype=torch.bool)
    if eos is not None:
        is_eos = torch.isin(proposal, eos)  # [B, k'+1]
        slot = torch.arange(width, device=proposal.device)[None, :]
        is_eos &= slot < a[:, None]
        first = torch.where(is_eos, slot, width).amin(1)  # [B]
        eos_hit = first < width
        a = torch.where(eos_hit, first + 1, a)
    eos_hit &= a <= budget  # an EOS beyond the budget is never generated
    finished = eos_hit | (a >= budget)
    return torch.minimum(a, budget), eos_hit, finished
