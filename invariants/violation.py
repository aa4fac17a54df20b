"""Violations and the exception that carries one (Spec §3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Violation:
    """One failed predicate: which invariant, where, expected vs actual."""

    invariant: str  # id, e.g. "I1"
    name: str  # e.g. "rectangular_alignment"
    round: int
    step: str
    row: int | None
    expected: Any
    actual: Any
    detail: str
    model: str | None = None
    request: int | None = None
    #: the forward call's number in the run (1 for the first), for the
    #: correctness invariants C1-C3, which are stated per call (Spec §3.12)
    call: int | None = None

    def __str__(self) -> str:
        if self.step == "outputs":  # C2, C3: what the decoder returned, traced to a call where one is known
            where = "the outputs" + (f", first wrong call #{self.call}" if self.call is not None else "")
        elif self.call is not None:
            where = f"call #{self.call}"
        else:
            where = f"round {self.round}, step {self.step!r}"
        if self.row is not None:
            where += f", row {self.row}"
            if self.request is not None:
                where += f" (request {self.request})"
        if self.model:
            where += f", model {self.model!r}"
        return (f"{self.invariant} {self.name} violated at {where}: {self.detail} "
                f"(expected {self.expected!r}, actual {self.actual!r})")


class InvariantViolation(AssertionError):
    """Raised by the checker at the first violation; ``.violation`` holds it and
    its fields are mirrored as attributes (``invariant``, ``round``, ``step``,
    ``row``, ``expected``, ``actual``)."""

    def __init__(self, violation: Violation, others: tuple[Violation, ...] = ()):
        self.violation = violation
        self.others = others
        self.invariant = violation.invariant
        self.name = violation.name
        self.round = violation.round
        self.step = violation.step
        self.row = violation.row
        self.model = violation.model
        self.call = violation.call
        self.expected = violation.expected
        self.actual = violation.actual
        extra = f" (+{len(others)} more violations in this step)" if others else ""
        super().__init__(str(violation) + extra)
