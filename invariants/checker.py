"""Walk the registry over an observation (Spec §3)."""

from __future__ import annotations

from .fields import require_fields
from .ledger import Ledger
from .observation import KVOracle, Observation
from .registry import INVARIANTS, OPTIONS
from .violation import InvariantViolation, Violation


def violations(obs: Observation, oracle: KVOracle | None = None, registry=INVARIANTS,
               ledger: Ledger | None = None) -> list[Violation]:
    """Every violation of every registered invariant, in registry order.

    ``ledger`` (one per run, given every observation in order) switches on
    I6 cache provenance and I7 committed stream, the default mode; ``oracle``
    switches on the semantic mode of I3 (fresh single-sequence forwards; see
    :func:`batchspec.invariants.cache.cache_correspondence`). Raises
    ``ValueError`` naming the field when ``obs`` cannot be checked.
    """
    require_fields(obs)
    if ledger is not None:
        ledger.observe(obs)
    options = {"oracle": oracle, "ledger": ledger}
    out: list[Violation] = []
    for _id, predicate in registry:
        option = OPTIONS.get(predicate)
        out.extend(predicate(obs, **{option: options[option]}) if option else predicate(obs))
    if ledger is not None:
        ledger.remember_commits(obs)
    return out


def check(obs: Observation, oracle: KVOracle | None = None, registry=INVARIANTS,
          ledger: Ledger | None = None) -> None:
    """Raise :class:`InvariantViolation` at the first violation, if any."""
    found = violations(obs, oracle, registry, ledger)
    if found:
        raise InvariantViolation(found[0], tuple(found[1:]))
