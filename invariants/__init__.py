"""Invariants of batch speculative decoding, as checkable data (Spec §3).

Two levels (Spec §3.12): the correctness invariants C1–C3
(:data:`CORRECTNESS`), true of every correct greedy decoder whatever its
shape, which :func:`watch` checks on any decoder that calls Hugging Face
models with no glue; and the layout invariants I1–I8 (:data:`INVARIANTS`) of
the paper's compact layout, which refine them: fill an :class:`Observation`
after every step and call :func:`check` or :func:`violations` with one
:class:`Ledger` per run, or call ``w.boundary`` inside :func:`watch`. This
package does not import ``batchspec.reference``.
"""

from .checker import check, violations
from .correctness import CORRECTNESS
from .holes import HOLE_AWARE
from .ledger import Ledger
from .observation import BOUNDARY_STEPS, MODELS, STEP_NAMES, CacheView, ForwardCall, KVOracle, Observation, SampledRound
from .recorder import Watch, watch
from .registry import INVARIANTS
from .violation import InvariantViolation, Violation

__all__ = [
    "BOUNDARY_STEPS", "CORRECTNESS", "CacheView", "ForwardCall", "HOLE_AWARE", "INVARIANTS", "InvariantViolation",
    "KVOracle", "Ledger", "MODELS", "Observation", "SampledRound", "STEP_NAMES", "Violation", "Watch", "check", "violations", "watch",
]
