"""Walk the registry over an observation (Spec §3)."""

from __future__ import annotations

from .cache import cache_correspondence
from .observation import KVOracle, Observation
from .registry import INVARIANTS
from .violation import InvariantViolation, Violation


def violations(obs: Observation, oracle: KVOracle | None = None,
               registry=INVARIANTS) -> list[Violation]:
    """Every violation of every registered invariant, in registry order.

    ``oracle`` switches on the semantic mode of I3 (fresh single-sequence
    forwards; see :func:`batchspec.invariants.cache.cache_correspondence`).
    """
    out: list[Violation] = []
    for _id, predicate in registry:
        if predicate is cache_correspondence:
            out.extend(predicate(obs, oracle=oracle))
        else:
            out.extend(predicate(obs))
    return out


def check(obs: Observation, oracle: KVOracle | None = None, registry=INVARIANTS) -> None:
    """Raise :class:`InvariantViolation` at the first violation, if any."""
    found = violations(obs, oracle, registry)
    if found:
        raise InvariantViolation(found[0], tuple(found[1:]))
