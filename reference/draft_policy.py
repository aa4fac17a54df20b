"""How many drafts a round proposes: ``num_draft_tokens="auto"`` (Spec §4.2.2).

A fixed ``k`` is the paper's setting. Where a verify pass over ``B·(k+1)``
tokens costs clearly more than one over ``B`` tokens (a CPU, a large batch),
the best ``k`` shrinks with the batch, down to plain decoding (BSP chose
``k`` from the batch size). :class:`AutoK` chooses ``k'`` before each round
from per-call costs it is *given* (a table measured before decoding, by the
caller; the algorithm never times anything, Contributing §4.7) and the acceptance it
has seen so far. Under greedy verification the choice cannot change the
output (Spec §5.2 holds for every ``k'``), only the speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

#: The largest ``k'`` the policy considers.
AUTO_MAX_K = 8

#: The policies ``num_draft_tokens`` may name instead of an int.
POLICY_NAMES = ("auto", "confident")


@dataclass(frozen=True)
class Costs:
    """Seconds per forward call, measured at a few batch sizes (Spec §4.2.2).

    ``draft[b]``: one draft call of one token per row at batch ``b``;
    ``target[b][n]``: one target call of ``n`` tokens per row at batch ``b``,
    for some ``n`` from 1 to ``AUTO_MAX_K + 1``. Other batch sizes and token
    counts interpolate linearly.
    """

    draft: dict[int, float]
    target: dict[int, dict[int, float]]

    def draft_call(self, batch: int) -> float:
        sizes = sorted(self.draft)
        return float(np.interp(batch, sizes, [self.draft[b] for b in sizes]))

    def target_call(self, batch: int, tokens: int) -> float:
        sizes = sorted(self.target)
        at = [float(np.interp(tokens, sorted(self.target[b]), [self.target[b][n] for n in sorted(self.target[b])]))
              for b in sizes]
        return float(np.interp(batch, sizes, at))


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens a row commits per round with ``k`` drafts when each draft is
    accepted with probability ``alpha`` given the ones before it:
    ``1 + alpha + ... + alpha^k`` (the bonus token always counts)."""
    return sum(alpha ** j for j in range(k + 1))


def round_seconds(costs: Costs, batch: int, k: int, alpha: float) -> float:
    """Model seconds of one round: ``k`` draft calls, one verify call over
    ``k + 1`` tokens, and the draft call that keeps the draft cache in step
    (the catch-up, needed with probability ``alpha^k``; always when ``k = 0``)."""
    catch_up = 1.0 if k == 0 else alpha ** k
    return (k + catch_up) * costs.draft_call(batch) + costs.target_call(batch, k + 1)


def best_k(costs: Costs, batch: int, alpha: float, k_max: int = AUTO_MAX_K) -> int:
    """``argmax_k expected_tokens / round_seconds`` over ``0 .. k_max``; the
    smallest such ``k`` on ties (Spec §4.2.2)."""
    rates = [expected_tokens(alpha, k) / round_seconds(costs, batch, k, alpha) for k in range(k_max + 1)]
    return int(np.argmax(rates))


@dataclass
class AutoK:
    """The ``"auto"`` draft-length policy (Spec §4.2.2).

    ``choose(batch)`` is called before a round, ``observe(drafted, accepted)``
    after it with ``k'`` and each row's ``m_i``. The acceptance estimate is
    the maximum-likelihood one for a row that stops at its first rejection:
    accepted drafts over drafts *tried* (a row with ``m_i < k'`` tried
    ``m_i + 1``), starting from ``prior`` worth ``prior_weight`` tries.
    """

    costs: Costs
    k_max: int = AUTO_MAX_K
    prior: float = 0.5
    prior_weight: float = 4.0
    accepted: float = field(default=0.0)
    tried: float = field(default=0.0)
    chosen: list[int] = field(default_factory=list)  # k chosen per round, for statistics

    @property
    def alpha(self) -> float:
        return (self.accepted + self.prior * self.prior_weight) / (self.tried + self.prior_weight)

    def choose(self, batch: int) -> int:
        k = best_k(self.costs, batch, self.alpha, self.k_max)
        self.chosen.append(k)
        return k

    def observe(self, drafted: int, accepted: list[int]) -> None:
        if drafted == 0:
            return  # a round without drafts tried none (its probe, if any, comes through probe())
        self.accepted += sum(accepted)
        self.tried += sum(m + (m < drafted) for m in accepted)

    def probe(self, matches: list[int]) -> None:
        """A round without drafts: per row, one first-slot try, 1 if it was
        accepted. Greedy: the draft's choice after the newest token (the
        catch-up's logits, computed anyway) equals the token the target
        committed. Sampling: the rule accepted its draw from the catch-up's
        ``q`` at the one slot it decides anyway (Spec §4.2.2).
        Without it ``k = 0`` would be absorbing: no tries, a frozen
        estimate, the same choice every round at that batch size."""
        self.accepted += sum(matches)
        self.tried += len(matches)


@dataclass
class Confident:
    """The confidence-stopped draft policy (Spec §4.2.3): keep drafting while
    the draft is sure of its proposals, up to ``k_max``.

    A row stays *confident* while every draft it proposed this round had a
    draft probability of at least ``threshold`` (under sampling, the
    probability of the drawn token under the warped ``q``). Drafting stops
    after the first draft at which no row is confident any more, or at
    ``k_max``. A less confident draft is still proposed (it may well be
    accepted); its successors are not. ``k'`` stays one number for the whole
    round, so the round's layout is that of a fixed ``k'`` (Spec §2). At
    batch 1 this is transformers' ``assistant_confidence_threshold``.
    """

    threshold: float = 0.4
    k_max: int = 16
    chosen: list[int] = field(default_factory=list)  # k' drafted per round, for statistics
    confident: torch.Tensor | None = field(default=None, repr=False)  # [B] bool, this round's rows

    def choose(self, batch: int) -> int:
        """The cap of the round; :meth:`keep_drafting` ends it earlier."""
        self.confident = None
        return self.k_max

    def keep_drafting(self, probability: torch.Tensor) -> bool:
        """``probability [B]``: each row's draft probability of its newest draft.
        True while some row has been confident at every draft of the round."""
        if self.confident is None:
            self.confident = torch.ones_like(probability, dtype=torch.bool)
        self.confident, more = keep_drafting(self.confident, probability, self.threshold)
        return more

    def observe(self, drafted: int, accepted: list[int]) -> None:
        self.chosen.append(drafted)


def keep_drafting(confident: torch.Tensor, probability: torch.Tensor, threshold: float) -> tuple[torch.Tensor, bool]:
    """``(confident after this draft [B], whether to draft again)`` (Spec §4.2.3): a row
    stays confident while each of its drafts had probability ``>= threshold``; drafting
    goes on while some row is confident."""
    confident = confident & (probability >= threshold)
    return confident, bool(confident.any())


def draft_length(k, batch: int) -> int:
    """``k`` for this round (its cap for a policy that stops while drafting):
    the int itself, or what a policy chooses."""
    return k if isinstance(k, int) else k.choose(batch)


def largest_k(k) -> int:
    """The most drafts a round of ``k`` (an int, a policy, or a policy's name) may propose."""
    if isinstance(k, str):
        return {"auto": AUTO_MAX_K, "confident": Confident.k_max}[k]
    return k if isinstance(k, int) else k.k_max


def stops_while_drafting(k) -> bool:
    """Whether ``k`` is a policy that may end a round's drafting early (Spec §4.2.3)."""
    return hasattr(k, "keep_drafting")


def observe_round(k, record) -> None:
    """Tell a policy what the round it chose did (no-op for a fixed ``k``),
    and, where the round probed acceptance without drafting and the policy
    takes it (``probe``), what the probe saw."""
    if not isinstance(k, int):
        k.observe(record.drafted, record.accepted)
        if getattr(record, "probed", None) is not None and hasattr(k, "probe"):
            k.probe(record.probed)
