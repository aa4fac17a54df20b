"""Statistics of a run, filled by the driver from the algorithm's events."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PHASES = ("draft", "verify", "realign", "other")


@dataclass
class Stats:
    """What happened, round by round. Times are measured around the algorithm
    by :mod:`batchspec.api`, never inside it (Contributing §4.7).

    Attributes:
        method: the name of the method that ran (``"eqspec"``, ``"masking"``, ...).
        rounds: how many speculative rounds ran, over all batches.
        target_calls: forward calls of the target model, prefill included.
        draft_calls: forward calls of the draft model, prefill and catch-up included.
        realignments: rounds whose unpad–append–repad moved some cache row (``δ_i ≠ 0``).
        per_round: one ``RoundRecord`` per round, in order: drafts proposed,
            accepted and committed per row, the width after the round.
        phase_seconds: wall-clock seconds per phase of :data:`PHASES` (draft,
            verify, realign, other), invariant checks excluded.
        check_seconds: wall-clock seconds spent checking invariants, kept out
            of the phases so that checking never looks like decoding cost.
        wall_seconds: wall-clock seconds of the whole call, checks included.
        generated_tokens: new tokens returned, summed over prompts.
        draft_policy: what the draft policy says about the run
            (``DraftPolicy.describe``): its name and settings; for ``auto``
            the costs it priced rounds with, the ``k'`` it chose and, where
            speculation could not pay, why it decoded without the draft.
        calibrations: the forward costs ``auto`` measured before this call
            (batch size, seconds per call shape, seconds spent); empty when
            its memo already held them (Spec §4.2.2).
    """

    method: str
    rounds: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    realignments: int = 0  # rounds whose repad moved some cache row
    per_round: list = field(default_factory=list)  # RoundRecord per round, in order
    phase_seconds: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})
    check_seconds: float = 0.0  # invariant checking, excluded from the phases
    wall_seconds: float = 0.0
    generated_tokens: int = 0
    draft_policy: dict | None = None  # DraftPolicy.describe() after the run
    calibrations: list = field(default_factory=list)  # what auto measured before this call

    @property
    def drafted_tokens(self) -> int:
        """Draft tokens proposed to the target, summed over rows and rounds."""
        return sum(r.drafted * len(r.requests) for r in self.per_round)

    @property
    def accepted_tokens(self) -> int:
        """Draft tokens the target accepted (``m_i``), summed."""
        return sum(sum(r.accepted) for r in self.per_round)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted draft tokens (0 when nothing was drafted)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def row_rounds(self) -> int:
        """Rows verified, summed over rounds (one target call serves each)."""
        return sum(len(r.requests) for r in self.per_round)

    @property
    def tokens_per_target_call(self) -> float:
        """Committed tokens per row per target verification call, ``1 .. k+1``."""
        committed = sum(sum(r.appended) for r in self.per_round)
        return committed / self.row_rounds if self.row_rounds else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        """For each draft slot ``j``, the fraction of rows that reached it (every
        earlier draft accepted) whose draft ``j`` was accepted (vLLM's metric)."""
        reached: dict[int, int] = {}
        kept: dict[int, int] = {}
        for r in self.per_round:
            for m in r.accepted:
                for j in range(min(m + 1, r.drafted)):
                    reached[j] = reached.get(j, 0) + 1
                    kept[j] = kept.get(j, 0) + (m > j)
        return [kept[j] / reached[j] for j in sorted(reached)]

    @property
    def mean_acceptance_length(self) -> float:
        """Mean ``m_i``, drafts accepted per row per round (0 when nothing was drafted)."""
        drafted = [m for r in self.per_round if r.drafted for m in r.accepted]
        return sum(drafted) / len(drafted) if drafted else 0.0

    @property
    def expected_tokens_per_target_call(self) -> float | None:
        """Tokens per row per target call that the recorded ``α = Σ min(p, q)``
        predict (Spec §5.4): ``Σ_{j=0}^{k'} Π_{i<j} α_i`` per row and round,
        averaged; before EOS and budget cuts. None for greedy runs."""
        alphas = [row for r in self.per_round if getattr(r, "alpha", None) for row in r.alpha]
        if not alphas:
            return None
        total = 0.0
        for row in alphas:
            reach = 1.0
            for a in row:
                total += reach
                reach *= a
            total += reach
        return total / len(alphas)

    @property
    def mean_alpha(self) -> list[float]:
        """Mean ``α`` at each draft slot over rows and rounds (sampling only)."""
        sums: dict[int, list[float]] = {}
        for r in self.per_round:
            for row in getattr(r, "alpha", None) or []:
                for j, a in enumerate(row):
                    sums.setdefault(j, []).append(a)
        return [sum(v) / len(v) for _, v in sorted(sums.items())]

    @property
    def wasted_tokens(self) -> int:
        """Verified tokens a method threw away (rollback's cost; 0 for the others)."""
        return sum(sum(r.wasted) for r in self.per_round if getattr(r, "wasted", None))

    @property
    def group_rate(self) -> float:
        """Rounds whose batch needed no realignment / all rounds: for EXSPEC the
        batches formed from one same-length group, for EQSPEC the rounds where
        every ``δ_i = 0`` and no row left (0 when no round ran)."""
        return 1 - self.realignments / self.rounds if self.rounds else 0.0

    @property
    def fallbacks(self) -> int:
        """EXSPEC rounds that found no same-length group and realigned."""
        return sum(getattr(r, "grouped", True) is False for r in self.per_round)

    @property
    def realignment_seconds(self) -> float:
        """Time spent realigning caches (the ``realign`` phase)."""
        return self.phase_seconds["realign"]

    @property
    def waiting_rounds(self) -> dict[int, int]:
        """Per request, rounds it spent queued or passed over while other rows
        ran (head-of-line blocking). EXSPEC's records list the waiting
        requests; for methods whose records do not, every request is taken as
        submitted before the first round (as in ``generate``), so it waited
        each round before its last one that it was not in."""
        if not any(hasattr(r, "waiting") for r in self.per_round):
            last, served = {}, {}
            for index, r in enumerate(self.per_round):
                for request in r.requests:
                    last[request] = index
                    served[request] = served.get(request, 0) + 1
            return {request: last[request] + 1 - served[request] for request in last}
        out: dict[int, int] = {}
        for r in self.per_round:
            for request in r.requests:
                out.setdefault(request, 0)
            for request in r.waiting:
                out[request] = out.get(request, 0) + 1
        return out

    @property
    def waiting_seconds(self) -> dict[int, float]:
        """Per request, the summed duration of the rounds it waited through
        (EXSPEC: its records carry the round's seconds; empty otherwise)."""
        if not any(hasattr(r, "waiting") for r in self.per_round):
            return {}
        out = {request: 0.0 for request in self.waiting_rounds}
        for r in self.per_round:
            for request in r.waiting:
                out[request] += r.seconds or 0.0
        return out

    def waiting_percentiles(self, q=(50, 90, 99)) -> dict:
        """``{"rounds": {50: .., 90: .., 99: ..}, "seconds": {...}}`` over requests
        (linear interpolation; empty dicts when nothing was recorded)."""
        out = {}
        for unit, values in (("rounds", self.waiting_rounds), ("seconds", self.waiting_seconds)):
            data = list(values.values())
            out[unit] = {p: float(np.percentile(data, p)) for p in q} if data else {}
        return out

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "method": self.method, "rounds": self.rounds, "target_calls": self.target_calls,
            "draft_calls": self.draft_calls, "realignments": self.realignments,
            "generated_tokens": self.generated_tokens, "acceptance_rate": self.acceptance_rate,
            "tokens_per_target_call": self.tokens_per_target_call, "wasted_tokens": self.wasted_tokens,
            "per_position_acceptance": self.per_position_acceptance,
            "mean_acceptance_length": self.mean_acceptance_length,
            "expected_tokens_per_target_call": self.expected_tokens_per_target_call,
            "mean_alpha": self.mean_alpha,
            "phase_seconds": dict(self.phase_seconds), "check_seconds": self.check_seconds,
            "wall_seconds": self.wall_seconds, "group_rate": self.group_rate,
            "fallbacks": self.fallbacks, "realignment_seconds": self.realignment_seconds,
            "waiting": self.waiting_percentiles(), "draft_policy": self.draft_policy,
            "calibrations": list(self.calibrations),
        }
