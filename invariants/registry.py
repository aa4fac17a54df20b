"""The ordered registry of invariants the checker walks (Spec §3).

Like the INVARIANTS list of a TLA+ model config: one tuple, in order. Each
entry is ``(id, predicate)``; every predicate is a pure function
``(Observation, **options) -> list[Violation]``, and names in its signature the
options it reads (``oracle``, ``ledger``, ``memo``; see
:func:`~batchspec.invariants.checker.reads`), so one entry here is all the
registration an invariant needs. The checks that need the run's history (I6,
I7) read it from a :class:`~batchspec.invariants.ledger.Ledger` passed as an
option; without one they are off (the structural mode).
"""

from __future__ import annotations

from .alignment import rectangular_alignment
from .cache import cache_correspondence
from .positions import position_continuity
from .provenance import cache_provenance, committed_stream
from .sampled_verification import sampled_verification
from .sync import draft_target_sync
from .verification import greedy_verification

INVARIANTS = (
    ("I1", rectangular_alignment),
    ("I2", position_continuity),
    ("I3", cache_correspondence),
    ("I4", draft_target_sync),
    ("I5", greedy_verification),
    ("I6", cache_provenance),
    ("I7", committed_stream),
    ("I8", sampled_verification),
)
