"""The rollback baseline: truncate every row to the batch minimum (Spec §6.2).

What Hugging Face's batch > 1 attempts did, done right: each round every row
keeps only ``min_i a_i`` tokens, so the batch stays rectangular and no cache
row ever shifts (Spec §5.3: all ``δ_i = 0`` when all ``a_i`` are equal). The
tokens kept are a prefix of each row's verified tokens, hence the target's
greedy choices, so the output stays exact; but one row that keeps rejecting
holds the whole batch to one token per round. The verified tokens thrown away
are counted per row in ``RoundRecord.wasted`` (``Stats.wasted_tokens``).

Built on EQSPEC through the :class:`~batchspec.reference.eqspec.Steps` hook:
only acceptance is swapped, no flag enters the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .. import acceptance
from ..acceptance import Verdict
from ..eqspec import STEPS, decode as eqspec_decode


@dataclass
class RolledBack(Verdict):
    """A verdict cut to the batch minimum, with the verdict it was cut from."""

    verified: Verdict | None = None


def truncate(drafts: torch.Tensor, target_logits: torch.Tensor) -> RolledBack:
    """Greedy acceptance (Spec §4.3.1), then every ``m_i`` cut to ``min_i m_i``.

    A row with ``m_i`` above the minimum ends on an accepted draft, which is
    the target's own choice there, so the kept tokens stay exact.
    """
    verdict = acceptance.greedy(drafts, target_logits)
    floor = verdict.accepted_drafts.min()
    return RolledBack(torch.minimum(verdict.accepted_drafts, floor), verdict.proposal, verdict)


def decode(models, prompts, requests, config):
    """Decode one batch with rollback; returns ``{request: RowOutput}``."""
    wasted: list[list[int]] = []  # per round, per row: verified tokens not committed

    def commit_counts(verdict: RolledBack, budget, eos):
        verified, _, _ = acceptance.commit_counts(verdict.verified, budget, eos)
        a, eos_hit, finished = acceptance.commit_counts(verdict, budget, eos)
        wasted.append((verified - a).tolist())
        return a, eos_hit, finished

    steps = replace(STEPS, accept=truncate, commit_counts=commit_counts)
    inner = eqspec_decode(models, prompts, requests, config.k, config.max_new_tokens, config.eos, steps)
    while True:
        try:
            event = next(inner)
        except StopIteration as stop:
            return stop.value
        if event.record is not None:  # one record per round, after its one commit_counts
            event.record.wasted = wasted.pop(0)
        yield event
