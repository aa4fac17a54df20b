"""What a round of ``k`` drafts costs and yields, for the ``"auto"`` draft policy (Spec §4.2.2).

:class:`Costs` holds seconds per forward call, measured at a few batch
sizes; :func:`best_k` prices every ``k`` from ``0`` to ``k_max`` as expected
tokens per model second and takes the best, and :func:`worth_trying` says,
before a run, whether any ``k >= 1`` is expected to finish the batch sooner
than plain decoding at all.
:class:`~batchspec.reference.draft_policy.Auto` calls them; the algorithm is
*given* the measured table and never times anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

#: The largest ``k'`` :class:`~batchspec.reference.draft_policy.Auto` considers.
AUTO_MAX_K = 8


@dataclass(frozen=True)
class Costs:
    """Seconds per forward call, measured at a few batch sizes (Spec §4.2.2).

    ``draft[b]``: one draft call of one token per row at batch ``b``;
    ``target[b][n]``: one target call of ``n`` tokens per row at batch ``b``,
    for some ``n`` from 1 to ``AUTO_MAX_K + 1``; ``draft_prefill[b]``: the
    draft's prefill at batch ``b``, per position of the padded prompt (none
    measured: free). Other batch sizes and token counts interpolate linearly.
    """

    draft: dict[int, float]
    target: dict[int, dict[int, float]]
    draft_prefill: dict[int, float] = field(default_factory=dict)

    def draft_call(self, batch: int) -> float:
        sizes = sorted(self.draft)
        return float(np.interp(batch, sizes, [self.draft[b] for b in sizes]))

    def draft_prefill_call(self, batch: int, width: int) -> float:
        """Seconds of the draft's prefill of ``batch`` prompts padded to ``width``."""
        if not self.draft_prefill:
            return 0.0
        sizes = sorted(self.draft_prefill)
        return width * float(np.interp(batch, sizes, [self.draft_prefill[b] for b in sizes]))

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
    """Model seconds of one round (Spec §4.2.2): ``k`` draft calls, one verify
    call over ``k + 1`` tokens, and when ``k = 0`` the catch-up call; for
    ``k >= 1`` greedy EQSPEC defers the catch-up to the next round's first
    draft call, one more token in a call that is paid anyway (Spec §4.2.1).
    ``alpha`` is unused: kept for the signature of the round's model."""
    catch_up = 1.0 if k == 0 else 0.0
    return (k + catch_up) * costs.draft_call(batch) + costs.target_call(batch, k + 1)


def best_k(costs: Costs, batch: int, alpha: float, k_max: int = AUTO_MAX_K) -> int:
    """``argmax_k expected_tokens / round_seconds`` over ``0 .. k_max``; the
    smallest such ``k`` on ties (Spec §4.2.2)."""
    rates = [expected_tokens(alpha, k) / round_seconds(costs, batch, k, alpha) for k in range(k_max + 1)]
    return int(np.argmax(rates))


#: The most tokens per row :func:`worth_trying` prices; a longer budget is priced
#: over its first ``HORIZON`` tokens, where the slowest row costs the most (Spec §4.2.2).
HORIZON = 256


def finish_probabilities(alpha: float, k: int, budget: int) -> np.ndarray:
    """``F[r]``: the probability that a row with ``budget`` tokens to commit has
    committed them all within ``r`` rounds of ``k`` drafts, each accepted with
    probability ``alpha`` given the ones before it, ``k'`` capped by what the row
    has left (Spec §4.2.2). ``r`` runs from 0 to ``budget`` (a round commits at
    least one token)."""
    left = budget - np.arange(budget + 1)  # tokens still to commit, per tokens committed n
    # commit[n, t]: the probability of committing t tokens in a round from n committed
    commit = np.zeros((budget + 1, k + 2))
    for n in range(budget):
        cap = min(k, int(left[n]))
        for m in range(cap + 1):
            commit[n, min(m + 1, int(left[n]))] += alpha ** m * ((1 - alpha) if m < cap else 1.0)
    p = np.zeros(budget + 1)
    p[0] = 1.0
    finished = [0.0]
    while finished[-1] < 1.0 - 1e-12 and len(finished) <= budget:
        after = np.zeros_like(p)
        after[budget] = p[budget]
        for t in range(1, min(k + 1, budget) + 1):
            after[t:] += p[:budget + 1 - t] * commit[:budget + 1 - t, t]
        p = after
        finished.append(float(p[budget]))
    return np.array(finished + [1.0] * (budget + 1 - len(finished)))


def rounds_to_finish(alpha: float, k: int, budget: int, rows: int) -> float:
    """Expected rounds until the slowest of ``rows`` independent rows has
    committed ``budget`` tokens (Spec §4.2.2): a static batch runs until its
    last row is done, ``E[max] = sum_r (1 - F(r)^rows)``."""
    return float(np.sum(1.0 - finish_probabilities(alpha, k, budget) ** rows))


def worth_trying(costs: Costs, batch: int, budget: int | None, alpha: float, k_max: int = AUTO_MAX_K,
                 width: int = 0) -> bool:
    """Whether some fixed ``k >= 1`` is expected to finish a batch of ``batch``
    rows, each with ``budget`` tokens to commit, sooner than plain decoding
    (one target call of one token per token, no draft) when drafts are
    accepted with probability ``alpha`` (Spec §4.2.2). Drafting pays the
    draft's prefill of prompts padded to ``width`` and then its rounds,
    counted to the batch's slowest row, every round at the full batch's
    cost; a budget longer than :data:`HORIZON` is priced over its first
    ``HORIZON`` tokens (with its share of the prefill). ``budget=None``
    (a scheduler, whose rows leave and are replaced) prices one row and no
    prefill. Each simplification overestimates what drafting costs:
    ``auto`` drafts only where it is expected to pay."""
    if budget is None:
        horizon, rows, prefill = HORIZON, 1, 0.0
    else:
        horizon, rows = max(1, min(budget, HORIZON)), batch
        prefill = costs.draft_prefill_call(batch, width) * horizon / max(budget, 1)
    plain = horizon * costs.target_call(batch, 1)
    return any(prefill + rounds_to_finish(alpha, k, horizon, rows) * round_seconds(costs, batch, k, alpha) < plain
               for k in range(1, k_max + 1))


def calibration_key(models, batch_size: int) -> tuple:
    """What a cost table depends on: the two models (by identity), the batch
    size, the target's dtype and device, and the CPU threads."""
    target = models.target
    return (id(target), id(models.draft), batch_size, str(target.dtype), str(target.device), torch.get_num_threads())
