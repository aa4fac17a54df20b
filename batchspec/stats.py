"""Statistics of a run, filled by the driver from the algorithm's events."""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("draft", "verify", "align", "other")


@dataclass
class Stats:
    """What happened, round by round. Times are measured around the algorithm
    by :mod:`batchspec.api`, never inside it (style §7)."""

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
        committed = sum(sum(r.committed) for r in self.per_round)
        return committed / self.row_rounds if self.row_rounds else 0.0

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "method": self.method, "rounds": self.rounds, "target_calls": self.target_calls,
            "draft_calls": self.draft_calls, "realignments": self.realignments,
            "generated_tokens": self.generated_tokens, "acceptance_rate": self.acceptance_rate,
            "tokens_per_target_call": self.tokens_per_target_call,
            "phase_seconds": dict(self.phase_seconds), "check_seconds": self.check_seconds,
            "wall_seconds": self.wall_seconds,
        }
