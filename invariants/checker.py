"""Walk the registry over an observation (Spec §3)."""

from __future__ import annotations

from inspect import signature

from .fields import require_fields
from .ledger import Ledger
from .memo import Memo
from .observation import KVOracle, Observation
from .registry import INVARIANTS
from .violation import InvariantViolation, Violation


def violations(obs: Observation, oracle: KVOracle | None = None, registry=INVARIANTS,
               ledger: Ledger | None = None, memo: Memo | None = None) -> list[Violation]:
    """Every violation of every registered invariant, in registry order.

    ``ledger`` (one per run, given every observation in order) switches on
    I6 cache provenance and I7 committed stream, the default mode; ``oracle``
    switches on the semantic mode of I3 (fresh single-sequence forwards; see
    :func:`batchspec.invariants.cache.cache_correspondence`); ``memo`` (one
    per run) keeps what the checks build once, such as a round's masks.
    Raises ``ValueError`` naming the field when ``obs`` cannot be checked.
    """
    require_fields(obs)
    memo = Memo() if memo is None else memo
    if ledger is not None:
        ledger.record_writes(obs, memo)
    options = {"oracle": oracle, "ledger": ledger, "memo": memo}
    out: list[Violation] = []
    for _id, predicate in registry:
        out.extend(predicate(obs, **{name: options[name] for name in reads(predicate)}))
    if ledger is not None:
        ledger.remember_commits(obs)
    memo.forget_calls()
    return out


def reads(predicate) -> tuple[str, ...]:
    """The checker's options (``oracle``, ``ledger``, ``memo``) that ``predicate`` names as
    parameters: a predicate asks for what it reads in its own signature, so that its
    registry entry is one ``(id, predicate)`` pair (Spec §3.11)."""
    return tuple(name for name in signature(predicate).parameters if name in OPTION_NAMES)


OPTION_NAMES = ("oracle", "ledger", "memo")


def check(obs: Observation, oracle: KVOracle | None = None, registry=INVARIANTS,
          ledger: Ledger | None = None, memo: Memo | None = None) -> None:
    """Raise :class:`InvariantViolation` at the first violation, if any."""
    found = violations(obs, oracle, registry, ledger, memo)
    if found:
        raise InvariantViolation(found[0], tuple(found[1:]))
