"""Shared pieces of the baseline, fault, audit and compare tests: fixed float64
tiny pairs, fixed prompts, the batch-1 greedy reference, predictions read
from a correct EQSPEC run, and the lazy contexts a watched call's labels are read through."""

from __future__ import annotations

import functools

import pytest
import torch

import batchspec
from batchspec.models import tiny

K, N = 3, 10  # num_draft_tokens, max_new_tokens of every scenario here

#: Three prompts of unequal length on the qwen3 pair: round 1 is uniform (every
#: row commits k + 1 = 4), round 2 is the first ragged round (4, 2, 2).
RAGGED_AT_2 = [[13, 41, 89, 42], [41, 24, 12, 82], [21, 94, 90, 41, 63, 22]]
#: The same plus a prompt whose greedy output emits the pad id 0 at index 2.
WITH_PAD_ID = RAGGED_AT_2 + [[52, 77, 6, 63, 33, 53]]


@functools.lru_cache(maxsize=None)
def pair(family: str = "qwen3"):
    """The float64 tiny pair of ``family`` with a perturbed draft, seed 0."""
    return tiny.pair(family, "perturbed", seed=0)


@functools.lru_cache(maxsize=None)
def _reference(family: str, prompt: tuple, n: int) -> tuple:
    target = pair(family)[0]
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=n, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


def reference(family: str, prompts, n: int = N) -> list[list[int]]:
    """The target's batch-1 greedy continuation of each prompt (``target.generate``)."""
    return [list(_reference(family, tuple(p), n)) for p in prompts]


def correct_run(family: str, prompts, batch_size=None):
    """EQSPEC on the same inputs (checked, semantic): its rounds are what a faulty run
    does until the fault first has an effect. Cached: do not mutate the result."""
    return _correct_run(family, tuple(map(tuple, prompts)), batch_size)


@functools.lru_cache(maxsize=None)
def _correct_run(family: str, prompts: tuple, batch_size):
    target, draft = pair(family)
    return batchspec.generate(target, draft, [list(p) for p in prompts], num_draft_tokens=K,
                              max_new_tokens=N, batch_size=batch_size, check_invariants="semantic")


def rounds(result, prompts):
    """Per round of ``result``: ``(record, L before it, rows that stay, tokens committed per row)``."""
    width = max(len(p) for p in prompts)
    offsets = {r: 0 for r in range(len(prompts))}
    records = result.stats.per_round
    out = []
    for t, rec in enumerate(records):
        staying = set(records[t + 1].requests) if t + 1 < len(records) else set()
        tokens = {}
        for request, a in zip(rec.requests, rec.appended):
            tokens[request] = result.sequences[request][offsets[request]: offsets[request] + a]
            offsets[request] += a
        out.append((rec, width, staying, tokens))
        width = rec.width
    return out


def first_ragged_round(result, prompts) -> int | None:
    """The first round whose staying rows commit different numbers of tokens."""
    for rec, _, staying, _ in rounds(result, prompts):
        counts = {a for r, a in zip(rec.requests, rec.appended) if r in staying}
        if len(counts) > 1:
            return rec.round
    return None


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread (2 cores shared); restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def lazy_sources(chains) -> list[str]:
    """The kinds of lazy context (``Moved``, ``Extended``, ``Own``) ``chains``' context
    labels are read through, newest first: empty once they are built."""
    kinds = []
    while chains is not None and chains.source is not None:
        kinds.append(type(chains.source).__name__)
        chains = chains.source.previous
    return kinds
