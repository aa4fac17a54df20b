"""What a round of ``k`` drafts costs and yields, for the ``"auto"`` draft policy (Spec §4.2.2).

:class:`Costs` holds seconds per forward call, measured at a few batch
sizes; :func:`best_k` prices every ``k`` from ``0`` to ``k_max`` as expected
tokens per model second and takes the best, and :func:`can_pay` says
whether any ``k >= 1`` could beat plain decoding at all.
:class:`~batchspec.reference.draft_policy.Auto` calls them; the algorithm is
*given* the measured table and never times anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: The largest ``k'`` :class:`~batchspec.reference.draft_policy.Auto` considers.
AUTO_MAX_K = 8


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


def can_pay(costs: Costs, batch: int, k_max: int = AUTO_MAX_K) -> bool:
    """Whether some ``k >= 1`` beats plain decoding (one target call of one
    token per token, no draft) even if every draft were accepted (Spec §4.2.2)."""
    plain = costs.target_call(batch, 1)
    return any((k + 1) / (k * costs.draft_call(batch) + costs.target_call(batch, k + 1)) > 1 / plain
               for k in range(1, k_max + 1))


def calibration_key(models, batch_size: int) -> tuple:
    """What a cost table depends on: the two models (by identity), the batch
    size, the target's dtype and device, and the CPU threads."""
    target = models.target
    return (id(target), id(models.draft), batch_size, str(target.dtype), str(target.device), torch.get_num_threads())
