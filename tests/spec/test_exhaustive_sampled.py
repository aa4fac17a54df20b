"""Bounded exhaustive check under speculative sampling (Spec §5.6, §4.3.2, §5.5.1).

Under sampling a pattern cannot be forced through the draft's tokens alone,
since acceptance is random; it is forced through the accept uniforms
instead. The uniforms double ``ForcedUniforms`` answers the ``"accept"``
purpose with 0 (always below ``min(1, p/q)``: accept) or with the largest
double below 1 (reject) at the positions listed, and every other purpose
with the real keyed uniforms, so drafts and residual draws stay random. The
scripted draft's logit of ``LOGIT`` makes ``q`` all but a point mass, so
``p(y) / q(y) = p(y) < 1`` and the forced rejection holds. Every round must
accept exactly the forced ``m_i``, the code's checker (I8 included) must be
silent after every step, and at every leaf each output must equal the
per-position reference run with the same draft and the same uniforms: batch
1, no cache, both models on the whole prefix (§5.5.1).

Scope: two rounds, both budgets, temperature 0.8, no EOS (the continuation
depends on the pattern, so "every EOS placement" has no fixed meaning here);
batch 1..2 and ``k`` 1..2 by default, batch 1..3 and ``k`` 1..3 with
``-m exhaustive``. Counts: Spec §5.6; times: docs/design.md.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import time

import pytest
import torch

from batchspec.reference.draft_policy import Fixed
from _exhaustive import Cell, Failure, Tree, cells, trees_of
from _spec_helpers import PROMPTS, greedy_continuation, one_thread
from batchspec.invariants import InvariantViolation, check
from batchspec.models import tiny
from batchspec.models.scripted import Script, ScriptedDraft
from batchspec.reference import STEPS, Event, Models, observation
from batchspec.reference.eqspec import eqspec_round
from batchspec.reference.sampling import Sampler, Warping, decide, keyed_uniforms
from batchspec.reference.state import RowOutput

LOGIT = 60.0  # q(y) = 1 / (1 + 95 e^-60): 1.0 in float64, so p(y) / q(y) = p(y) < 1
REJECT = 1.0 - 2.0 ** -53  # the largest uniform: at or above every p(y) < 1
WARPING = Warping(temperature=0.8)
SEED = 7
SCOPE = cells((1, 2), (1, 2), 2)  # default (CI)
FULL_SCOPE = cells((1, 2, 3), (1, 2, 3), 2)  # -m exhaustive
HORIZON = 2 * 4 + 1


class ForcedUniforms:
    """``Sampler.uniforms`` with the accept uniforms forced: ``reject`` maps a
    key to the positions whose draft is rejected; every other position accepts."""

    def __init__(self, reject: dict | None = None):
        self.reject = reject or {}

    def __call__(self, keys, positions, purpose, like):
        if purpose != "accept":
            return keyed_uniforms(keys, positions, purpose, like)
        return like.new_tensor([REJECT if int(t) in self.reject.get(tuple(key), ()) else 0.0
                                for key, t in zip(keys, positions)])


@pytest.fixture(scope="module")
def pair():
    with one_thread(), torch.no_grad():
        target, inner = tiny.pair("llama", "unrelated", seed=0)
        return target, inner, [greedy_continuation(target, p, HORIZON) for p in PROMPTS]


class SampledWalk:
    """Depth-first walk over every forced pattern of one tree, on tensors."""

    def __init__(self, pair, tree: Tree, logit: float = LOGIT, sampler_changes: dict | None = None):
        self.target, inner, continuations = pair
        self.tree, self.keys = tree, {r: (SEED, r) for r in range(tree.cell.batch)}
        self.scripts = {r: Script(len(p), continuations[r]) for r, p in enumerate(PROMPTS[: tree.cell.batch])}
        self.draft = ScriptedDraft(inner, self.scripts, logit)
        self.uniforms = ForcedUniforms()
        self.sampler = Sampler(WARPING, self.keys, uniforms=self.uniforms, **(sampler_changes or {}))
        self.steps, self.models = dataclasses.replace(STEPS, sampler=self.sampler), Models(self.target, self.draft)
        self.memo: dict = {}
        self.patterns = self.states = 0

    def run(self) -> "SampledWalk":
        requests = list(range(self.tree.cell.batch))
        self.draft.follow(requests)
        calls: list = []
        with one_thread(), torch.no_grad():
            state = self.steps.prefill(self.models, [list(p) for p in PROMPTS[: len(requests)]], requests, calls)
            self.check(observation(Event("other", "prefill", state, calls)), ())
            self.walk(state, {r: RowOutput() for r in requests}, (), {r: frozenset() for r in requests})
        return self

    def check(self, obs, path) -> None:
        try:
            check(obs)
        except InvariantViolation as error:
            raise Failure(self.tree, path, obs.step, f"tensor invariant violated: {error}") from None
        self.states += 1

    def walk(self, state, outputs, path, rejected) -> None:
        cell, budget = self.tree.cell, self.tree.budget
        if len(path) == cell.rounds or not state.batch:
            return self.leaf(outputs, path, rejected)
        k_round = min(cell.k, int((budget - state.generated).min()))
        for pattern in itertools.product(range(k_round + 1), repeat=state.batch):
            branch, out, here = copy.deepcopy(state), copy.deepcopy(outputs), path + (pattern,)
            forced = dict(rejected)  # slot m of row i is decided at position c_i + m (Spec §4.3.2)
            for b, (request, m) in enumerate(zip(branch.requests, pattern)):
                if m < k_round:
                    forced[request] = rejected[request] | {int(branch.length[b]) + m}
            self.uniforms.reject = {self.keys[r]: positions for r, positions in forced.items()}
            self.draft.follow(branch.requests)
            record = None
            for event in eqspec_round(self.models, branch, Fixed(cell.k), budget, None, out, self.steps):
                if event.state.batch:
                    self.check(observation(event), here)
                record = event.record or record
            if record.accepted != list(pattern):
                raise Failure(self.tree, here, "verify", f"accepted {record.accepted}, forced {list(pattern)}")
            self.walk(branch, out, here, forced)

    def leaf(self, outputs, path, rejected) -> None:
        self.patterns += 1
        for request, out in outputs.items():
            want = self.reference(request, rejected[request])
            ok = (out.tokens == want[: len(out.tokens)] and len(out.tokens) < len(want)) if out.stop is None \
                else (out.tokens == want and out.stop == "length")
            if not ok:
                raise Failure(self.tree, path, "leaf", f"request {request} output {out.tokens} (stop {out.stop}), "
                                                       f"per-position reference {want}")

    def reference(self, request: int, rejected) -> list[int]:
        """The per-position reference (Spec §5.5.1) with this draft and these uniforms."""
        prompt, script = PROMPTS[request], self.scripts[request]
        sampler = Sampler(WARPING, {0: self.keys[request]}, uniforms=ForcedUniforms({self.keys[request]: rejected}))
        sequence = list(prompt)
        while len(sequence) - len(prompt) < self.tree.budget:
            t = len(sequence)
            if tuple(sequence) not in self.memo:
                ids = torch.tensor([sequence])
                self.memo[tuple(sequence)] = self.target(input_ids=ids, use_cache=False).logits[:, -1]  # [1, V]
            p = sampler.p(self.memo[tuple(sequence)])
            logits = torch.zeros_like(self.memo[tuple(sequence)])
            logits[0, script.proposal(t - len(prompt), logits.shape[1])] = self.draft.logit
            q = sampler.q(logits)
            _, token = decide(sampler, p, q, sampler.propose(q, sampler.u([0], [t], "draft", q)), [0], [t])
            sequence.append(int(token[0]))
        return sequence[len(prompt):]


def sweep_sampled(pair, cells) -> None:
    trees = trees_of(cells, pair[2])
    patterns = states = 0
    start, cpu = time.perf_counter(), time.process_time()
    for tree in trees:
        walk = SampledWalk(pair, tree).run()
        patterns, states = patterns + walk.patterns, states + walk.states
        c = tree.cell
        if tree.budget == c.horizon:  # no row leaves: (k+1)^(B*R) leaves
            assert walk.patterns == (c.k + 1) ** (c.batch * c.rounds), tree
    print(f"\nexhaustive sampled: {len(trees)} trees, {patterns:,} patterns, {states:,} tensor states; "
          f"{time.perf_counter() - start:.1f}s wall, {time.process_time() - cpu:.1f}s CPU")


@pytest.mark.slow
def test_sampled_patterns_match_the_per_position_reference(pair):
    sweep_sampled(pair, SCOPE)


@pytest.mark.exhaustive
def test_sampled_full(pair):
    sweep_sampled(pair, FULL_SCOPE)


SMALL = Tree(Cell(2, 2, 2), (), 6)


def test_greedy_scripted_logits_do_not_force_sampled_acceptance(pair):
    """The forced-pattern check fires: with the greedy script's logit of 1 the
    draft's q is almost flat, y is random, and a forced rejection can pass."""
    with pytest.raises(Failure, match=r"B=2 k=2 .*pattern \[.*\].*forced"):
        SampledWalk(pair, SMALL, logit=1.0).run()


def test_wrong_residual_is_caught_at_a_leaf(pair):
    """The leaf check fires: a residual without max(0, p - q) (a negative
    control) is self-consistent, so I8 is silent, but the output is no
    longer the per-position reference's."""
    with pytest.raises(Failure, match=r"B=2 k=2 .*pattern \[.*\].*step 'leaf'.*per-position reference"):
        SampledWalk(pair, SMALL, sampler_changes={"residual": lambda p, q: p}).run()
