"""The one place where acceptance is decided (Spec §4.3).

Greedy verification (Spec §4.3.1) and speculative sampling (Spec §4.3.2),
which decides every slot by the per-position rule of
:mod:`.sampling` from the draft distributions the draft step keeps per
drafted token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .sampling import decide


@dataclass
class Verdict:
    """Outcome of verifying one round of drafts."""

    accepted_drafts: torch.Tensor  # [B] m_i, leading drafts the target agrees with
    proposal: torch.Tensor  # [B, k'+1]: drafts[:m_i], then the bonus token at m_i
    # [B, k'] Σ min(p, q) per drafted slot (sampling only); keyword-only, so that a
    # subclass's positional fields (the rollback baseline's) keep their place
    alpha: torch.Tensor | None = field(default=None, kw_only=True)
    # [B] sampling with k' = 0: 1 where the rule accepted the draft's own draw at the one
    # slot, a first-slot try that costs nothing (Spec §4.2.2); None otherwise
    probed: torch.Tensor | None = field(default=None, kw_only=True)


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
    if k == 0:  # nothing drafted (autoregressive): m_i = 0 and the proposal is the target's choice
        return Verdict(choice.new_zeros(choice.shape[0]), choice)
    agree = (drafts == choice[:, :k]).long()  # [B, k']
    accepted = agree.cumprod(1).sum(1)  # [B]
    return Verdict(accepted, _propose(drafts, choice, accepted))


def _propose(drafts: torch.Tensor, decided: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
    """``drafts[:m_i]`` then ``decided[m_i]`` per row, ``[B, k'+1]`` (slots after it unused)."""
    k = drafts.shape[1]
    slot = torch.arange(k + 1, device=drafts.device)[None, :]  # [1, k'+1]
    padded = torch.cat([drafts, decided[:, k:]], dim=1)  # [B, k'+1]
    bonus = decided.gather(1, accepted[:, None])  # [B, 1]
    return torch.where(slot < accepted[:, None], padded, bonus)


def sampled(rnd, target_logits: torch.Tensor) -> Verdict:
    """Speculative sampling (Spec §4.3.2): every slot ``j`` of row ``i``, the
    bonus slot ``k'`` included, is decided by the per-position rule at
    position ``t = c_i + j`` from the target's ``p`` at input ``j`` and the
    draft's ``q`` at that slot (``rnd.draft_logits[k']`` comes from the
    catch-up call the sampled round makes before verifying). ``m_i`` is the
    number of leading slots whose draft was accepted. With ``k' = 0`` the
    one slot's draw from ``q`` is a first-slot try, and whether the rule
    accepted it is returned as ``probed`` (Spec §4.2.2).
    """
    sampler, k = rnd.sampler, rnd.drafts.shape[1]
    decided, alpha, agree, probed = [], [], [], None
    for j in range(k + 1):
        positions = (rnd.start + j).tolist()
        p = sampler.p(target_logits[:, j])  # [B, V]
        q = sampler.q(rnd.draft_logits[j]) if rnd.draft_logits else None
        y = None
        if q is not None:
            y = rnd.drafts[:, j] if j < k else sampler.propose(q, sampler.u(rnd.requests, positions, "draft", q))
        ok, token = decide(sampler, p, q, y, rnd.requests, positions)
        decided.append(token)
        if j < k:
            agree.append(ok.long())
            alpha.append(torch.minimum(p, q).sum(-1))
        elif k == 0 and q is not None:
            probed = ok.long()
    decided = torch.stack(decided, dim=1)  # [B, k'+1]
    accepted = torch.stack(agree, 1).cumprod(1).sum(1) if k else decided.new_zeros(decided.shape[0])
    alpha = torch.stack(alpha, 1) if k else None
    return Verdict(accepted, _propose(rnd.drafts, decided, accepted), alpha=alpha, probed=probed)


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
