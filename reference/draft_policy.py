"""How many drafts a round proposes: one interface, :class:`DraftPolicy`,
and its three policies (Spec §4.2, §4.2.2, §4.2.3).

``num_draft_tokens`` is converted once, at the API edge, by
:func:`as_policy`: an int ``k`` becomes :class:`Fixed` (the paper's
setting), ``"auto"`` :class:`Auto` (``k'`` chosen before each round from
measured per-call costs and the acceptance seen so far), ``"confident"``
:class:`Confident` (drafting stops when the draft is unsure). The rounds
only call the interface. A new policy is a subclass here and, to have a
name, an entry of :data:`POLICIES`. The algorithm never times anything:
:class:`Auto` is *given* a function that measures (Spec §4.2.2). Under
greedy verification no policy can change the output (Spec §5.2 holds for
every ``k'``), only the speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from .draft_costs import AUTO_MAX_K, Costs, best_k, calibration_key, worth_trying


class DraftPolicy:
    """The draft-length interface every round calls (Spec §4.2).

    ``k_max``: the most drafts a round may propose. ``stops_early``: whether
    :meth:`keep_drafting` is consulted after each draft (Spec §4.2.3).
    ``spares_last``: whether a round also drafts fewer than the largest
    remaining budget, so that no draft is made that only the target's own
    token could replace (Spec §4.2).
    A policy object is a setting the caller can keep and reuse; each run
    decodes with a fresh copy from :meth:`start`, so that per-run state
    (acceptance seen, the round's confident rows) never leaks between runs.
    """

    k_max: int
    stops_early = False
    spares_last = False

    def check(self) -> None:
        """Raise a ``ValueError`` naming a field whose value no round can use."""

    def start(self, models, batch_size: int, calibrate: Callable, budget: int | None = None,
              width: int = 0) -> DraftPolicy:
        """The copy one run decodes with. ``calibrate(target, draft, batch_size,
        k_max) -> Costs`` measures forward costs; only :class:`Auto` calls it,
        and only it reads ``budget``, the tokens each row may commit (``None``:
        not known in advance, as in a scheduler), and ``width``, the padded
        prompt length its draft would prefill."""
        return replace(self)

    def choose(self, batch: int) -> int:
        """``k`` for the next round of ``batch`` rows (its cap when :attr:`stops_early`)."""
        return self.k_max

    def keep_drafting(self, probability: torch.Tensor) -> bool:
        """After each draft: ``probability [B]``, each row's draft probability of its newest draft."""
        return True

    def learn(self, drafted: int, accepted: list[int]) -> None:
        """After each round: ``k'`` and each row's ``m_i``."""

    def probe(self, matches: list[int]) -> None:
        """After a round without drafts: per row, 1 if a one-token draft would have been accepted."""

    def describe(self) -> dict:
        """What the run's statistics say about the policy."""
        return {"policy": str(self)}

    def __str__(self) -> str:
        """The name ``num_draft_tokens`` gives it (``4``, ``auto``, ``confident``)."""
        return next((name for name, kind in POLICIES.items() if type(self) is kind), type(self).__name__)


@dataclass(frozen=True)
class Fixed(DraftPolicy):
    """``k`` drafts every round, capped by the smallest remaining budget (Spec §4.2).
    ``Fixed(0)`` is plain decoding (Spec §4.8)."""

    k: int

    @property
    def k_max(self) -> int:
        return self.k

    def check(self) -> None:
        require_count("num_draft_tokens", self.k, 1)

    def start(self, models, batch_size: int, calibrate: Callable, budget: int | None = None,
              width: int = 0) -> DraftPolicy:
        return self

    def describe(self) -> dict:
        return {"policy": "fixed", "k": self.k}

    def __str__(self) -> str:
        return str(self.k)


@dataclass
class Auto(DraftPolicy):
    """The ``"auto"`` draft-length policy (Spec §4.2.2).

    :meth:`start` prices rounds with the costs measured for this (target,
    draft, batch size, dtype, device, threads), measuring them only the first
    time: ``calibrations`` is the memo, shared by every run started from this
    object, so that one ``Auto()`` passed to many calls calibrates once per
    shape. Where no ``k >= 1`` is expected to finish the batch's ``budget``
    sooner than plain decoding at the ``prior`` acceptance, counting the
    draft's prefill and rounds to the slowest row (:func:`~batchspec.reference.draft_costs.worth_trying`),
    the run's ``k_max`` is 0: the caller decodes plainly, without the draft
    (no draft prefill, no catch-up calls), and the statistics say why. A
    user who knows the pair accepts more can say so with ``prior``.

    ``choose(batch)`` is called before a round, ``learn(drafted, accepted)``
    after it. The acceptance estimate is the maximum-likelihood one for a row
    that stops at its first rejection: accepted drafts over drafts *tried*
    (a row with ``m_i < k'`` tried ``m_i + 1``), from ``prior`` worth
    ``prior_weight`` tries.
    """

    k_max: int = AUTO_MAX_K
    spares_last = True
    prior: float = 0.5
    prior_weight: float = 4.0
    calibrations: dict = field(default_factory=dict, repr=False)  # key -> Costs, the memo
    costs: Costs | None = None  # this run's table (given, or from the memo)
    budget: int | None = None  # this run's tokens per row (set by start), for statistics
    accepted: float = field(default=0.0, init=False)
    tried: float = field(default=0.0, init=False)
    chosen: list[int] = field(default_factory=list, init=False)  # k' per round, for statistics

    def check(self) -> None:
        require_count("Auto.k_max", self.k_max, 0)
        if not 0.0 <= self.prior <= 1.0:
            raise ValueError(f"Auto.prior must be in [0, 1], got {self.prior!r}")

    def start(self, models, batch_size: int, calibrate: Callable, budget: int | None = None,
              width: int = 0) -> DraftPolicy:
        costs = self.costs
        if costs is None:
            key = calibration_key(models, batch_size)
            if key not in self.calibrations:
                self.calibrations[key] = calibrate(models.target, models.draft, batch_size, self.k_max)
            costs = self.calibrations[key]
        tries = worth_trying(costs, batch_size, budget, self.prior, self.k_max, width)
        return replace(self, costs=costs, k_max=self.k_max if tries else 0, budget=budget)

    @property
    def alpha(self) -> float:
        return (self.accepted + self.prior * self.prior_weight) / (self.tried + self.prior_weight)

    def choose(self, batch: int) -> int:
        k = best_k(self.costs, batch, self.alpha, self.k_max)
        self.chosen.append(k)
        return k

    def learn(self, drafted: int, accepted: list[int]) -> None:
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

    def describe(self) -> dict:
        out = {"policy": str(self), "k_max": self.k_max, "alpha": self.alpha, "chosen": sorted(set(self.chosen))}
        if self.costs is not None:
            out["costs"] = {"draft": dict(self.costs.draft), "target": {b: dict(t) for b, t in self.costs.target.items()}}
        if self.k_max == 0:
            tokens = "its budget" if self.budget is None else f"{self.budget} tokens"
            out["note"] = (f"k'=0: at the measured costs and the prior acceptance {self.prior:g}, no k >= 1 is "
                           f"expected to finish {tokens} per row sooner than plain decoding (the draft's prefill "
                           "counted, rounds counted to the slowest row); decoded without the draft")
        return out


@dataclass
class Confident(DraftPolicy):
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
    stops_early = True
    spares_last = True
    chosen: list[int] = field(default_factory=list, init=False)  # k' drafted per round, for statistics
    confident: torch.Tensor | None = field(default=None, init=False, repr=False)  # [B] bool, this round's rows

    def check(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"Confident.threshold must be in (0, 1], got {self.threshold!r}")
        require_count("Confident.k_max", self.k_max, 1)

    def choose(self, batch: int) -> int:
        """The cap of the round; :meth:`keep_drafting` ends it earlier."""
        self.confident = None
        return self.k_max

    def keep_drafting(self, probability: torch.Tensor) -> bool:
        """True while some row has been confident at every draft of the round."""
        if self.confident is None:
            self.confident = torch.ones_like(probability, dtype=torch.bool)
        self.confident, more = keep_drafting(self.confident, probability, self.threshold)
        return more

    def learn(self, drafted: int, accepted: list[int]) -> None:
        self.chosen.append(drafted)

    def describe(self) -> dict:
        return {"policy": str(self), "threshold": self.threshold, "k_max": self.k_max}


def keep_drafting(confident: torch.Tensor, probability: torch.Tensor, threshold: float) -> tuple[torch.Tensor, bool]:
    """``(confident after this draft [B], whether to draft again)`` (Spec §4.2.3): a row
    stays confident while each of its drafts had probability ``>= threshold``; drafting
    goes on while some row is confident."""
    confident = confident & (probability >= threshold)
    return confident, bool(confident.any())


def learn_from_round(policy: DraftPolicy, record) -> None:
    """Tell ``policy`` what the round it sized did (its ``RoundRecord``):
    ``k'``, each ``m_i`` and, for a round without drafts, the probe."""
    policy.learn(record.drafted, record.accepted)
    if record.probed is not None:
        policy.probe(record.probed)


#: The policies ``num_draft_tokens`` may name instead of an int.
POLICIES: dict[str, type[DraftPolicy]] = {"auto": Auto, "confident": Confident}
POLICY_NAMES = tuple(POLICIES)


def require_count(name: str, value, low: int) -> None:
    """``value`` is an int (not a bool) ``>= low``, else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def as_policy(value) -> DraftPolicy:
    """``num_draft_tokens`` as a checked :class:`DraftPolicy`: an int ``k >= 1``
    is ``Fixed(k)``, a name of :data:`POLICIES` that policy with its defaults,
    a policy itself (Spec §4.2). Anything else is a ``ValueError`` naming it."""
    if isinstance(value, str):
        if value not in POLICIES:
            raise ValueError(f"num_draft_tokens must be an int >= 1 or one of {POLICY_NAMES}, got {value!r}")
        return POLICIES[value]()
    policy = value if isinstance(value, DraftPolicy) else Fixed(value)
    policy.check()
    return policy
