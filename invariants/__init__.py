"""Synchronisation invariants of batch speculative decoding, as checkable data (Spec §3).

Fill an :class:`Observation` after every step of any batch speculative
decoder and call :func:`check` (raise at the first violation) or
:func:`violations` (collect them), passing one :class:`Ledger` per run to
check cache contents (I6) and the committed stream (I7); or wrap a decoder
that calls Hugging Face models in :func:`watch`, which fills the observations
from the models' own forward calls. This package does not import
``batchspec.reference``: it knows only the observation record.
"""

from .checker import check, violations
from .holes import HOLE_AWARE
from .ledger import Ledger
from .observation import BOUNDARY_STEPS, MODELS, STEPS, CacheView, ForwardCall, KVOracle, Observation, SampledRound
from .recorder import Watch, watch
from .registry import INVARIANTS
from .violation import InvariantViolation, Violation

__all__ = [
    "BOUNDARY_STEPS", "CacheView", "ForwardCall", "HOLE_AWARE", "INVARIANTS", "InvariantViolation",
    "KVOracle", "Ledger", "MODELS", "Observation", "SampledRound", "STEPS", "Violation", "Watch", "check", "violations", "watch",
]
