"""The bounded exhaustive check's machinery (Spec §5.6); not collected by pytest.

:class:`AbstractWalk` enumerates every acceptance pattern of one tree on the
spec's abstract model and checks every state; :class:`Replay` runs the tensor
code on chosen leaves of that tree in lockstep with the abstract model. Both
raise :class:`Failure`, whose message names the tree, the pattern and the step.
"""

from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field

import torch

from _spec_helpers import PROMPTS, Compare
from batchspec.reference.draft_policy import Fixed
from batchspec.invariants import InvariantViolation, check
from batchspec.models.scripted import Script, ScriptedDraft
from batchspec.oracle import hf_oracle
from batchspec.reference import STEPS, Event, Models, observation
from batchspec.reference.eqspec import eqspec_round
from batchspec.reference.state import RowOutput


#: the windows C1's window rule is checked at on every call: shorter than the longest prompt (5)
WINDOWS = (2, 3)


class Failure(AssertionError):
    """One property failed on one pattern."""

    def __init__(self, tree, path, step: str, problem: str):
        super().__init__(f"{tree}, pattern {list(path)} (m_i per round), step {step!r}: {problem}")


@dataclass(frozen=True)
class Cell:
    """One cell of the enumeration: batch size, ``k``, rounds, and whether to place EOS everywhere."""

    batch: int
    k: int
    rounds: int
    eos: bool = False

    @property
    def horizon(self) -> int:
        return self.rounds * (self.k + 1)

    def trees(self, continuations) -> list["Tree"]:
        """Every EOS placement (none, or each token id that first occurs in some
        row within the horizon), by every budget (the horizon, and ``k + 1`` so
        that a later round has ``k' < k``)."""
        eos = [()]
        if self.eos:
            eos += [(t,) for t in sorted({t for c in continuations[: self.batch] for t in c[: self.horizon]})]
        budgets = [self.horizon, self.k + 1] if self.k > 1 else [self.horizon]
        return [Tree(self, e, b) for e, b in itertools.product(eos, budgets)]


def cells(batches, ks, rounds: int, eos_batches=(), eos_ks=()) -> list[Cell]:
    return [Cell(b, k, rounds, b in eos_batches and k in eos_ks) for b in batches for k in ks]


def trees_of(cells: list[Cell], continuations) -> list["Tree"]:
    return [tree for cell in cells for tree in cell.trees(continuations)]


@dataclass(frozen=True)
class Tree:
    """One tree of the walk: a cell, its EOS ids and its budget (max_new_tokens)."""

    cell: Cell
    eos: tuple
    budget: int

    def __str__(self) -> str:
        c = self.cell
        return f"B={c.batch} k={c.k} rounds={c.rounds} eos={list(self.eos)} max_new_tokens={self.budget}"


@dataclass
class Pair:
    """The real tiny pair, its target's batch-1 greedy continuations, and both
    models seen as the abstract model's functions (memoised: one forward per record)."""

    target: torch.nn.Module
    inner: torch.nn.Module  # the real draft model under the script
    continuations: list[list[int]]
    target_fn: object
    inner_fn: object

    @property
    def vocab(self) -> int:
        return self.inner.get_output_embeddings().out_features


@dataclass
class Tally:
    """What a sweep checked, and how long each half took."""

    patterns: int = 0  # leaves: complete acceptance patterns
    states: int = 0  # abstract observations that passed every check
    rounds: int = 0
    finished: dict = field(default_factory=lambda: {"eos": 0, "length": 0, None: 0})
    trees: int = 0
    replayed: int = 0  # leaves replayed on the tensor code
    tensor_states: int = 0  # tensor events compared with the abstract model
    abstract_s: float = 0.0
    tensor_s: float = 0.0

    def add(self, other: "Tally") -> None:
        for name in ("patterns", "states", "rounds", "trees", "replayed", "tensor_states", "abstract_s", "tensor_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, value in other.finished.items():
            self.finished[key] += value

    def __str__(self) -> str:
        return (f"{self.trees} trees, {self.patterns:,} patterns, {self.rounds:,} rounds, {self.states:,} states "
                f"in {self.abstract_s:.1f}s; tensor replay of {self.replayed:,} patterns, "
                f"{self.tensor_states:,} states in {self.tensor_s:.1f}s; stops {self.finished}")


def abstract_models(spec, pair: Pair, tree: Tree):
    """Fresh scripts (request -> Script) and the abstract models over them."""
    scripts = {r: spec["Script"](tuple(p), pair.continuations[r]) for r, p in enumerate(PROMPTS[: tree.cell.batch])}
    return scripts, {"target": pair.target_fn, "draft": spec["scripted_draft"](scripts, pair.vocab, pair.inner_fn)}


def copy_outputs(outputs: dict) -> dict:
    return {r: {"tokens": list(o["tokens"]), "stop": o["stop"]} for r, o in outputs.items()}


class AbstractWalk:
    """Depth-first walk over every acceptance pattern of one tree (Spec §5.6).

    Every ``every``-th leaf (counted by ``counter``, shared across trees) is
    kept in ``sampled`` for the tensor replay; ``every = 0`` keeps none."""

    def __init__(self, spec, pair: Pair, tree: Tree, every: int = 0, counter: itertools.count | None = None):
        self.spec, self.tree = spec, tree
        self.scripts, self.models = abstract_models(spec, pair, tree)
        self.eos = tree.eos
        autoregressive = spec["autoregressive"]
        self.expected = {r: autoregressive(pair.target_fn, list(p), tree.budget, self.eos)
                         for r, p in enumerate(PROMPTS[: tree.cell.batch])}
        self.every, self.counter = every, counter or itertools.count()
        self.tally, self.sampled = Tally(trees=1), []
        self.chosen: dict = {}  # record -> the target's choice (C2, Spec §3.12.3): a pure function, shared by branches

    def run(self) -> Tally:
        start = time.perf_counter()
        prompts = [list(p) for p in PROMPTS[: self.tree.cell.batch]]
        calls: list = []
        batch = self.spec["prefill"](self.models, prompts, list(range(len(prompts))), calls)
        self.check(self.spec["Observation"]("prefill", batch, calls), ())
        self.walk(batch, {r: {"tokens": [], "stop": None} for r in range(len(prompts))}, ())
        self.tally.abstract_s = time.perf_counter() - start
        return self.tally

    def check(self, obs, path) -> None:
        if not obs.batch.tokens:
            return
        broken = self.spec["violations"](obs)
        if broken:
            raise Failure(self.tree, path, obs.step, f"abstract invariants {broken} violated")
        if not self.spec["correct_calls"](obs, self.chosen):  # (b) implies (a), Spec §5.8
            raise Failure(self.tree, path, obs.step, "C1 violated on a state that keeps I1-I7")
        for call in obs.calls:  # C1's window rule, for windows shorter than the longest prompt (Spec §3.12.2)
            rows = self.spec["attended_rows"](call, obs.batch.caches)
            for w in WINDOWS:
                if not self.spec["one_window"](call, rows, w):
                    raise Failure(self.tree, path, obs.step, f"C1's window rule (W = {w}) violated on a state "
                                                             "that keeps I1-I7")
        if not self.spec["tight"](obs.batch):
            raise Failure(self.tree, path, obs.step, "grid not tight (Spec §5.1.1)")
        self.tally.states += 1

    def walk(self, batch, outputs, path) -> None:
        spec, tree = self.spec, self.tree
        if len(path) == tree.cell.rounds or not batch.tokens:
            return self.leaf(outputs, path)
        k_round = min(tree.cell.k, min(tree.budget - spec["generated"](batch, i) for i in range(len(batch.tokens))))
        for pattern in itertools.product(range(k_round + 1), repeat=len(batch.tokens)):
            branch, out, here = spec["copy_batch"](batch), copy_outputs(outputs), path + (pattern,)
            spec["force"](self.scripts, branch, pattern, k_round)
            pad, length, requests = list(branch.pad), list(branch.length), list(branch.requests)
            record = None
            for obs in spec["eqspec_round"](self.models, branch, tree.cell.k, tree.budget, self.eos, out):
                self.check(obs, here)
                record = obs.record or record
            finished = [out[r]["stop"] is not None for r in requests]
            problems = spec["round_problems"](pad, length, k_round, pattern, record, finished)
            if problems:
                raise Failure(tree, here, "realign", f"round properties {problems} violated, record {record}")
            self.tally.rounds += 1
            self.walk(branch, out, here)

    def leaf(self, outputs, path) -> None:
        for request, out in outputs.items():
            want, got = self.expected[request], out["tokens"]
            if out["stop"] is None:  # stopped by the round horizon: a proper prefix so far
                ok = got == want[: len(got)] and len(got) < len(want)
            else:
                ok = got == want and out["stop"] == ("eos" if want[-1] in self.eos else "length")
            if not ok:
                raise Failure(self.tree, path, "leaf", f"request {request} output {got} (stop {out['stop']}), "
                                                       f"batch-1 greedy output {want}")
            self.correctness(request, got, out["stop"] is not None, path)
            self.tally.finished[out["stop"]] += 1
        self.tally.patterns += 1
        if self.every and next(self.counter) % self.every == 0:
            self.sampled.append(path)


    def correctness(self, request, got, finished, path) -> None:
        """C2 and C3 on one output, and the statement of §5.7 (Spec §5.8: they follow from I1-I7)."""
        spec, prompt = self.spec, PROMPTS[request]
        if not spec["target_choices"](prompt, got, self.chosen):
            raise Failure(self.tree, path, "leaf", f"C2 violated: request {request} output {got}")
        if finished and not spec["stops_where_it_should"](got, self.tree.budget, self.eos):
            raise Failure(self.tree, path, "leaf", f"C3 violated: request {request} output {got}")
        if finished and not spec["correctness_implies_exact"](self.models["target"], prompt, got, self.chosen,
                                                               self.tree.budget, self.eos):
            raise Failure(self.tree, path, "leaf", f"§5.7 fails: request {request} output {got}")


class Replay:
    """The tensor code on chosen leaves of one tree, in lockstep with the
    abstract model: shared prefixes are run once (a trie of the paths), the
    tensor state is copied per branch. After every step the tensor state must
    map onto the abstract one (``Compare``) and the code's checker must be
    silent; at every leaf both decoders' outputs must be equal."""

    def __init__(self, spec, pair: Pair, tree: Tree, paths: list, steps=STEPS):
        self.spec, self.pair, self.tree, self.steps = spec, pair, tree, steps
        self.trie: dict = {}
        for path in paths:
            node = self.trie
            for pattern in path:
                node = node.setdefault(pattern, {})
        self.scripts, self.abstract = abstract_models(spec, pair, tree)
        scripts = {r: Script(len(p), pair.continuations[r]) for r, p in enumerate(PROMPTS[: tree.cell.batch])}
        self.draft = ScriptedDraft(pair.inner, scripts)
        self.models = Models(pair.target, self.draft)
        self.eos = torch.tensor(sorted(tree.eos), dtype=torch.long) if tree.eos else None
        self.compare = Compare(spec, hf_oracle({"target": pair.target, "draft": pair.inner}))
        self.tally = Tally(replayed=len(paths))

    def run(self) -> Tally:
        start = time.perf_counter()
        requests = list(range(self.tree.cell.batch))
        prompts = [list(p) for p in PROMPTS[: self.tree.cell.batch]]
        self.draft.follow(requests)
        calls, abstract_calls = [], []
        state = self.steps.prefill(self.models, prompts, requests, calls)
        batch = self.spec["prefill"](self.abstract, prompts, requests, abstract_calls)
        self.step(Event("other", "prefill", state, calls), self.spec["Observation"]("prefill", batch, abstract_calls), ())
        self.descend(state, batch, {r: RowOutput() for r in requests},
                     {r: {"tokens": [], "stop": None} for r in requests}, (), self.trie)
        self.tally.tensor_s = time.perf_counter() - start
        return self.tally

    def descend(self, state, batch, real_out, abstract_out, path, trie) -> None:
        cell, budget = self.tree.cell, self.tree.budget
        if not trie:
            got = {r: (o.tokens, o.stop) for r, o in real_out.items()}
            want = {r: (o["tokens"], o["stop"]) for r, o in abstract_out.items()}
            if got != want:
                raise Failure(self.tree, path, "leaf", f"tensor outputs {got} != abstract outputs {want}")
            return
        k_round = min(cell.k, min(budget - self.spec["generated"](batch, i) for i in range(len(batch.tokens))))
        for pattern, below in trie.items():
            branch, real, here = copy.deepcopy(state), copy.deepcopy(real_out), path + (pattern,)
            abstract, out = self.spec["copy_batch"](batch), copy_outputs(abstract_out)
            # the abstract batch equals the tensor state (checked), so one `force` scripts both drafts
            self.spec["force"](self.scripts, abstract, pattern, k_round)
            self.spec["force"](self.draft.scripts, abstract, pattern, k_round)
            self.draft.follow(branch.requests)
            events = eqspec_round(self.models, branch, Fixed(cell.k), budget, self.eos, real, self.steps)
            observations = self.spec["eqspec_round"](self.abstract, abstract, cell.k, budget, self.tree.eos, out)
            for event, obs in itertools.zip_longest(events, observations):
                self.step(event, obs, here)
            self.descend(branch, abstract, real, out, here, below)

    def step(self, event, obs, path) -> None:
        if event is None or obs is None:
            raise Failure(self.tree, path, (event or obs).step, "one decoder yielded more steps than the other")
        try:
            self.compare(event, obs)
        except AssertionError as error:
            raise Failure(self.tree, path, obs.step, f"tensor state differs from the abstract model: {error}") from None
        if event.state.batch:
            try:
                check(observation(event))
            except InvariantViolation as error:
                raise Failure(self.tree, path, obs.step, f"tensor invariant violated: {error}") from None
        self.tally.tensor_states += 1


def sweep(spec, pair: Pair, trees: list[Tree], every: int, steps=STEPS) -> tuple[Tally, dict]:
    """Walk every tree on the abstract model; replay every ``every``-th leaf
    (in walk order across all trees) on the tensor code. Returns the total and
    each tree's own tally."""
    total, each, counter = Tally(), {}, itertools.count()
    with torch.no_grad():
        for tree in trees:
            walk = AbstractWalk(spec, pair, tree, every, counter)
            each[tree] = walk.run()
            if walk.sampled:
                each[tree].add(Replay(spec, pair, tree, walk.sampled, steps).run())
            total.add(each[tree])
    return total, each
