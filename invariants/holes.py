"""The hole-aware invariant set: a layout with holes, positions from the mask's cumsum (Spec §7.1, §3.10).

I1 demands the compact layout (``p_i`` zeros, then ``c_i`` ones). It is
sufficient for correct output, not necessary: a decoder may leave rejected
drafts in place as holes (mask 0) and give every fed token the position
``cumsum(mask) - 1``; its output is still exact. For such a decoder select
:data:`HOLE_AWARE` (``check(obs, registry=HOLE_AWARE)`` or
``watch(..., registry=HOLE_AWARE)``): I1 is replaced by I1°, and the other
predicates already read the mask, not ``p_i``: positions are checked against
the cumsum of the mask passed (I2), cache correspondence per live slot (I3
semantic, I6 with content index ``cumsum(mask) - 1``), the mask of every call
against the grid's (I4). Masking in the BSP style, positions counting slots
holes included, still violates I2.
"""

from __future__ import annotations

from ._util import reporter
from .observation import Observation
from .registry import INVARIANTS
from .violation import Violation


def hole_alignment(obs: Observation) -> list[Violation]:
    """I1°: every row is a 0/1 mask over the ``L`` grid slots whose count of ones
    is ``c_i`` (and ``p_i = L - c_i`` counts the masked slots, padding and holes
    alike), and the newest committed token sits in the last slot, attended: it
    leads the next call (Spec §3.10).

    That a slot once masked is never unmasked again is not checked here; I6
    sees its consequence (a hole that becomes live holds a key that was
    never written for its content index).
    """
    report = reporter(obs, "I1°", "hole_alignment")
    rows, width = obs.tokens.shape
    if not (len(obs.pad) == len(obs.length) == rows == obs.mask.shape[0]) or obs.mask.shape[1] != width:
        return [report(None, (rows, width), (len(obs.pad), len(obs.length), tuple(obs.mask.shape)),
                       "pad, length, mask and tokens disagree on the grid's shape")]
    binary = ((obs.mask == 0) | (obs.mask == 1)).all(1).tolist()  # [B]
    ones = (obs.mask != 0).sum(1).tolist()
    last = (obs.mask[:, -1] != 0).tolist()
    out: list[Violation] = []
    for i in range(rows):
        p, c = obs.pad[i], obs.length[i]
        if not binary[i]:
            out.append(report(i, "a 0/1 mask", obs.mask[i].tolist(), "grid mask is not 0/1"))
        elif c != ones[i] or p + c != width or c < 1:
            out.append(report(i, {"c_i": ones[i], "p_i": width - ones[i]}, {"c_i": c, "p_i": p},
                              "c_i is not the mask's count of ones, or p_i + c_i != L"))
        elif not last[i]:
            out.append(report(i, 1, 0, "the last grid slot (the newest committed token) is masked"))
    return out


#: I1° in I1's place, then I2–I7 unchanged.
HOLE_AWARE = (("I1°", hole_alignment),) + tuple(entry for entry in INVARIANTS if entry[0] != "I1")
