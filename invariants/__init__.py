"""Synchronisation invariants of batch speculative decoding, as checkable data (Spec §3).

Fill an :class:`Observation` after every step of any batch speculative
decoder and call :func:`check` (raise at the first violation) or
:func:`violations` (collect them). This package does not import
``batchspec.reference``: it knows only the observation record.
"""

from .checker import check, violations
from .observation import BOUNDARY_STEPS, CacheView, ForwardCall, KVOracle, Observation, SampledRound
from .registry import INVARIANTS
from .violation import InvariantViolation, Violation

__all__ = [
    "BOUNDARY_STEPS", "CacheView", "ForwardCall", "INVARIANTS", "InvariantViolation",
    "KVOracle", "Observation", "SampledRound", "Violation", "check", "violations",
]
