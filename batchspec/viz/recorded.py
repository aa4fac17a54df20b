"""Cells from what the recorder saw: an outside decoder's observation and its ledger.

:mod:`batchspec.viz.cells` reads batchspec's own traces; a decoder checked
with :func:`batchspec.invariants.watch` has no trace, only the
:class:`~batchspec.invariants.Observation` the check read (``w.caught``, the
step of the first violation) and the run's :class:`~batchspec.invariants.Ledger`.
"""

from __future__ import annotations

from ..invariants.provenance import stale_slots
from .cells import Cells


def provenance_cells(obs, ledger, model: str = "target") -> Cells:
    """One model's cache at ``obs`` as I6 sees it (Spec §3.6): each slot ``s < L - 1``
    labelled with the grid token that lives there, ``committed`` when it holds
    the key a call wrote for that token at that content index, ``unknown``
    when it does not (outlined: the first such slot of each row), ``pad``
    where the grid mask is 0."""
    stale = stale_slots(obs, ledger, model)
    if stale is None:
        raise ValueError(f"the ledger holds no writes of the {model} model")
    live, bad = (obs.mask[:, : stale.shape[1]] != 0).tolist(), stale.tolist()
    tokens = obs.tokens[:, : stale.shape[1]].tolist()
    kinds = [["unknown" if b else "committed" if held else "pad" for held, b in zip(*row)] for row in zip(live, bad)]
    requests = obs.requests if obs.requests is not None else list(range(len(kinds)))
    marks = [(i, row.index(True)) for i, row in enumerate(bad) if True in row]
    return Cells(kinds, [[t if k != "pad" else None for t, k in zip(*row)] for row in zip(tokens, kinds)],
                 [f"r{r}: p={p}, c={c}" for r, p, c in zip(requests, obs.pad, obs.length)],
                 f"{model} cache at round {obs.round}, {obs.step}: does each slot hold its token's key?",
                 list(range(len(kinds[0]) if kinds else 0)), marks)
