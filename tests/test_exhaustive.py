"""Bounded exhaustive check: every acceptance pattern, every EOS placement (Spec §5.2).

A scripted draft (``batchspec.models.scripted``) follows the target's greedy
continuation and deviates where we choose, so it forces any acceptance
pattern: in a round of ``k'`` drafts, row ``i`` accepts ``m_i`` drafts when its
first deviation is ``m_i`` drafts into the round. The check walks the tree of
rounds depth first: each node is a batch state after a round, each branch one
vector ``(m_1, .., m_B)`` in ``{0..k'}^B`` for the next round (the state is
copied, not recomputed). After every step every invariant is checked on the
real tensors (``check_invariants=True``'s checker); at every leaf each row's
output must equal the target's batch-1 greedy output, cut at EOS and budget;
and every round must have accepted exactly the forced ``m_i``.

Default run: batch 1..3, ``k`` 1..2, two rounds, every EOS placement for
batch <= 2: 57 trees, 2,398 patterns, 10,831 checked states, about 65 s on
two shared cores. ``-m slow``: ``test_full`` takes batch 1..3, ``k`` 1..3,
three rounds, every EOS placement for batch <= 2 and ``k`` <= 2, except the
cell batch 3 / ``k`` 3: 33,473 patterns, 166,500 states, about 25 min on one
core; ``test_full_largest_cell`` is that cell, 4^9 = 262,144 patterns (plus a
budget-limited tree), about 145 s per 1/64 shard, so about 2.6 h on one core:
split it with ``BATCHSPEC_EXHAUSTIVE_SHARD=i/n``.
"""

from __future__ import annotations

import copy
import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: helpers by path
from _spec_helpers import PROMPTS, cut, greedy_continuation, one_thread
from batchspec.invariants import check
from batchspec.models import tiny
from batchspec.models.scripted import Script, ScriptedDraft
from batchspec.reference import STEPS, Event, Models, observation
from batchspec.reference.eqspec import eqspec_round
from batchspec.reference.state import RowOutput


@dataclass
class Tally:
    """What a walk checked."""

    patterns: int = 0  # leaves: complete acceptance patterns (per tree)
    states: int = 0  # events whose observation passed every invariant
    rounds: int = 0
    finished: dict = field(default_factory=lambda: {"eos": 0, "length": 0, None: 0})

    def add(self, other: "Tally") -> None:
        self.patterns += other.patterns
        self.states += other.states
        self.rounds += other.rounds
        for key, value in other.finished.items():
            self.finished[key] += value


class Walk:
    """Depth-first walk over acceptance patterns for one batch of prompts."""

    def __init__(self, target, draft: ScriptedDraft, continuations, prompts, k, rounds, budget, eos,
                 shard=(0, 1)):
        self.models = Models(target, draft)
        self.draft, self.prompts, self.k = draft, prompts, k
        self.rounds, self.budget = rounds, budget
        self.eos = set(eos)
        self.eos_tensor = torch.tensor(sorted(eos), dtype=torch.long) if eos else None
        self.expected = {r: cut(continuations[r], self.eos, budget) for r in range(len(prompts))}
        self.tally = Tally()
        self.shard = shard

    def run(self) -> Tally:
        requests = list(range(len(self.prompts)))
        self.draft.follow(requests)
        calls: list = []
        state = STEPS.prefill(self.models, [list(p) for p in self.prompts], requests, calls)
        self._check(Event("other", "prefill", state, calls))
        self._walk(state, {r: RowOutput() for r in requests}, 1)
        return self.tally

    def _check(self, event: Event) -> None:
        if event.state.batch:
            check(observation(event))
            self.tally.states += 1

    def _walk(self, state, outputs, depth: int) -> None:
        if depth > self.rounds or not state.batch:
            self._leaf(outputs)
            return
        remaining = self.budget - state.generated  # [B]
        k_round = min(self.k, int(remaining.min()))
        for index, pattern in enumerate(itertools.product(range(k_round + 1), repeat=state.batch)):
            if depth == 1 and index % self.shard[1] != self.shard[0]:
                continue
            branch, out = copy.deepcopy(state), copy.deepcopy(outputs)
            for b, (request, m) in enumerate(zip(branch.requests, pattern)):
                generated = int(branch.generated[b])
                self.draft.scripts[request].deviations = {generated + m} if m < k_round else set()
            self.draft.follow(branch.requests)
            record = None
            for event in eqspec_round(self.models, branch, self.k, self.budget, self.eos_tensor, out):
                self._check(event)
                record = event.record or record
            assert record.accepted == list(pattern), (record, pattern)
            self.tally.rounds += 1
            self._walk(branch, out, depth + 1)

    def _leaf(self, outputs) -> None:
        self.tally.patterns += 1
        for request, out in outputs.items():
            expected = self.expected[request]
            if out.stop is None:  # stopped by the round horizon: a prefix so far
                assert out.tokens == expected[: len(out.tokens)] and len(out.tokens) < len(expected)
            else:
                assert out.tokens == expected, (request, out.tokens, expected)
                assert out.stop == ("eos" if expected[-1] in self.eos else "length")
            self.tally.finished[out.stop] += 1


@pytest.fixture(scope="module")
def setup():
    """A real tiny Llama target, a real smaller draft under the script, and the
    target's greedy continuations of the prompts (computed once)."""
    with one_thread():
        target, inner = tiny.pair("llama", "unrelated", seed=0)
        horizon = 3 * 4 + 1
        continuations = [greedy_continuation(target, p, horizon) for p in PROMPTS]
        ids = torch.tensor([PROMPTS[0]])
        generated = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=horizon, eos_token_id=None, pad_token_id=0)
        assert generated[0, len(PROMPTS[0]):].tolist() == continuations[0]
        yield target, inner, continuations


def eos_placements(continuations, batch: int, horizon: int) -> list[tuple[int, ...]]:
    """No EOS, and each token id that first occurs in some row within ``horizon``:
    every (row, generated index) at which an EOS can first appear."""
    ids = sorted({t for c in continuations[:batch] for t in c[:horizon]})
    return [()] + [(t,) for t in ids]


@dataclass(frozen=True)
class Cell:
    """One grid cell: batch size, ``k``, rounds, and whether to place EOS everywhere."""

    batch: int
    k: int
    rounds: int
    eos: bool = False


def grid(batches, ks, rounds: int, eos_batches=(), eos_ks=()) -> list[Cell]:
    return [Cell(b, k, rounds, b in eos_batches and k in eos_ks) for b in batches for k in ks]


#: Default (CI): every pattern of two rounds for batch 1..3 and k 1..2, every
#: EOS placement for batch 1..2.
DEFAULT = grid((1, 2, 3), (1, 2), 2, eos_batches=(1, 2), eos_ks=(1, 2))
#: ``-m slow``: every pattern of three rounds for batch 1..3 and k 1..3, every
#: EOS placement for batch 1..2 and k 1..2. The cell batch 3, k 3 alone has
#: 4^9 = 262,144 patterns (most of the total) and is its own test.
FULL = grid((1, 2, 3), (1, 2, 3), 3, eos_batches=(1, 2), eos_ks=(1, 2))
LARGEST = Cell(3, 3, 3)


def sweep(setup, cells: list[Cell], shard: tuple[int, int] = (0, 1)) -> tuple[Tally, int]:
    """Walk every tree of ``cells``; return the tally and the number of trees.

    ``shard = (i, n)`` keeps the first-round branches whose index is ``i`` mod
    ``n`` (to split the full run over processes)."""
    target, inner, continuations = setup
    total, trees = Tally(), 0
    with one_thread(), torch.no_grad():
        for cell in cells:
            prompts = PROMPTS[: cell.batch]
            horizon = cell.rounds * (cell.k + 1)
            eos_choices = eos_placements(continuations, cell.batch, horizon) if cell.eos else [()]
            budgets = [horizon, cell.k + 1] if cell.k > 1 else [horizon]  # the second makes k' < k
            for eos, budget in itertools.product(eos_choices, budgets):
                scripts = {r: Script(len(p), continuations[r]) for r, p in enumerate(prompts)}
                draft = ScriptedDraft(inner, scripts)
                walk = Walk(target, draft, continuations, prompts, cell.k, cell.rounds, budget, eos, shard)
                total.add(walk.run())
                trees += 1
    return total, trees


def test_scripted_draft_forces_the_pattern(setup):
    """The forcing device itself: deviation at generated index 1 of row 0 and
    none on row 1 gives m = (1, k') in the first round, and the draft cache is
    the real one (its call changed the cache)."""
    target, inner, continuations = setup
    scripts = {r: Script(len(p), continuations[r], {1} if r == 0 else set()) for r, p in enumerate(PROMPTS[:2])}
    walk = Walk(target, ScriptedDraft(inner, scripts), continuations, PROMPTS[:2], 3, 1, 12, ())
    walk.draft.follow([0, 1])
    with one_thread(), torch.no_grad():
        state = STEPS.prefill(walk.models, PROMPTS[:2], [0, 1], [])
        before = state.draft_cache.get_seq_length()
        events = list(eqspec_round(walk.models, state, 3, 12, None, {0: RowOutput(), 1: RowOutput()}))
    assert events[-1].record.accepted == [1, 3]
    assert events[0].drafts[0].tolist() == [continuations[0][0]]
    assert state.draft_cache.get_seq_length() == state.width - 1 > before


def test_default(setup):
    start = time.perf_counter()
    tally, trees = sweep(setup, DEFAULT)
    seconds = time.perf_counter() - start
    print(f"\nexhaustive default: {trees} trees, {tally.patterns} patterns, {tally.rounds} rounds, "
          f"{tally.states} states, {seconds:.1f}s, stops {tally.finished}")
    forced = sum((c.k + 1) ** (c.batch * c.rounds) for c in DEFAULT)  # the trees without EOS or budget cut
    assert tally.patterns > forced and tally.finished["eos"] > 0 and tally.finished["length"] > 0


def _shard() -> tuple[int, int]:
    """``BATCHSPEC_EXHAUSTIVE_SHARD=i/n`` keeps first-round branches ``i`` mod ``n``."""
    i, n = (int(x) for x in os.environ.get("BATCHSPEC_EXHAUSTIVE_SHARD", "0/1").split("/"))
    return i, n


def _report(name: str, setup, cells) -> Tally:
    total, shard = Tally(), _shard()
    for cell in cells:
        start = time.perf_counter()
        tally, trees = sweep(setup, [cell], shard)
        total.add(tally)
        print(f"\n{name} {cell} shard {shard[0]}/{shard[1]}: {trees} trees, {tally.patterns} patterns, "
              f"{tally.rounds} rounds, {tally.states} states, {time.perf_counter() - start:.1f}s", flush=True)
    print(f"{name}: {total.patterns} patterns, {total.states} states, stops {total.finished}")
    return total


@pytest.mark.slow
def test_full(setup):
    total = _report("exhaustive full", setup, [c for c in FULL if (c.batch, c.k) != (LARGEST.batch, LARGEST.k)])
    assert total.finished["eos"] > 0 and total.finished["length"] > 0


@pytest.mark.slow
def test_full_largest_cell(setup):
    """Batch 3, k 3, three rounds: 262,144 patterns; split it with
    ``BATCHSPEC_EXHAUSTIVE_SHARD=i/n`` (n up to 64, the first round's branches)."""
    total = _report("exhaustive largest cell", setup, [LARGEST])
    shards = _shard()[1]
    assert 64 % shards == 0, "shard the 64 first-round branches evenly"
    assert total.patterns >= 4 ** 9 // shards  # plus the patterns of the budget-limited tree
