"""The benchmark's cases: methods × batch sizes × ``k``, repeated in interleaved
order, every output checked against the target's batch-1 greedy output.

Timing happens here, around whole calls, never inside the algorithm (Contributing §4.7).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

import batchspec

from ..draft_lengths import start
from ..reference import Models
from ..reference.draft_policy import DraftPolicy, as_policy
from ..testing import reference_greedy
from . import peers
from .costs import measure_costs, measure_prefill, median_costs, median_prefill
from .ideal import ideal_generate_seconds, ideal_speculative_seconds
from .memory import peak_bytes
from .steadiness import probe, summary, workload
from .timing import Timing, timed

#: our methods; peers are transformers' own decoders
OURS = ("autoregressive", "eqspec", "exspec")
PEERS = ("generate", "assisted", "generate_batch", "custom_generate")
SPECULATIVE = ("eqspec", "exspec", "assisted", "custom_generate")
#: methods that take a draft policy (custom_generate: batchspec's EQSPEC behind transformers' generate)
POLICED = ("eqspec", "exspec", "custom_generate")


@dataclass(frozen=True)
class Case:
    """One case of the benchmark. ``k`` is None for methods that draft nothing,
    else the label of ``policy`` (``4``, ``"auto"``, ``"confident"``)."""

    method: str
    batch: int
    k: int | str | None = None
    policy: DraftPolicy | None = field(default=None, compare=False, repr=False)  # one object per label, reused

    @property
    def label(self) -> str:
        return self.method if self.k is None else f"{self.method} k={self.k}"


@dataclass
class Cell:
    """What the repeats of one :class:`Case` measured."""

    case: Case
    prompts: int
    seconds: list[float] = field(default_factory=list)  # wall-clock, per repeat
    cpu_seconds: list[float] = field(default_factory=list)  # process CPU time, per repeat
    device_seconds: list[float] = field(default_factory=list)  # CUDA-event time, per repeat (CUDA only)
    tokens: int = 0
    mismatches: list[int] = field(default_factory=list)  # prompt indices whose output differs
    stats: dict | None = None  # ours: the last repeat's Stats.as_dict()
    per_round: list | None = None  # the last repeat's round records (greedy: every repeat's)
    peak_bytes: int | None = None
    ideal_speedup: float | None = None
    target_calls: int | None = None  # the last repeat's target forward calls (peers' too)
    call_seconds: float | None = None  # the run priced as its forward calls alone (zero bookkeeping)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.median


def label(policy: DraftPolicy) -> int | str:
    """How tables and JSON name a draft policy: ``k`` for a fixed one, else its name."""
    text = str(policy)
    return int(text) if text.isdigit() else text


def all_cases(methods, batches, ks) -> list[Case]:
    """Every case: speculative methods at each ``k`` (ints, names or policies,
    each converted once and its object shared by its cases); assisted only
    at batch 1 (transformers refuses larger batches); ``custom_generate``
    without ``auto`` (transformers' settings name no calibrated policy: it
    would calibrate inside every timed call)."""
    policies = [as_policy(k) for k in ks]
    out = []
    for b in batches:
        for m in methods:
            if m == "assisted" and b != 1:
                continue
            for p in (policies if m in POLICED else [None]):
                if m == "custom_generate" and str(p) == "auto":
                    continue
                out.append(Case(m, b, None if p is None else label(p), p))
    return out


def calibrate(pair, cases) -> list[dict]:
    """Start every case's policy once before anything is timed, so that
    ``auto`` measures its forward costs here (once per batch size, into the
    memo its object keeps), never inside a timed call; returns what it measured."""
    reports: list[dict] = []
    for case in cases:
        if case.policy is not None:
            start(Models(pair.target, pair.draft), case.policy, case.batch, reports.append)
    return reports


def counted_case(pair, case: Case, prompts, max_new_tokens: int):
    """:func:`run_case` and the target forward calls it made (a hook, for peers and ours alike)."""
    calls: list = []
    hook = pair.target.register_forward_hook(lambda *_: calls.append(1))
    try:
        return (*run_case(pair, case, prompts, max_new_tokens), len(calls))
    finally:
        hook.remove()


def run_case(pair, case: Case, prompts, max_new_tokens: int):
    """``(sequences, Timing, stats or None)`` of one call."""
    (seqs, stats), timing = timed(lambda: _decode(pair, case, prompts, max_new_tokens), pair.target.device)
    return seqs, timing, stats


def _decode(pair, case: Case, prompts, max_new_tokens: int):
    """``(sequences, stats or None)``: one call of ``case``'s decoder."""
    target, draft, eos = pair.target, pair.draft, pair.eos_token_id
    if case.method == "generate":
        return peers.hf_generate(target, prompts, case.batch, max_new_tokens, eos), None
    if case.method == "assisted":
        return peers.hf_assisted(target, draft, prompts, max_new_tokens, eos), None
    if case.method == "custom_generate":
        return peers.hf_custom(target, draft, prompts, case.batch, max_new_tokens, eos, case.policy), None
    if case.method == "generate_batch":
        return peers.hf_continuous(target, prompts, max_new_tokens, eos), None
    result = batchspec.generate(target, draft, prompts, method=case.method, num_draft_tokens=case.policy or case.k or 1,
                                max_new_tokens=max_new_tokens, batch_size=case.batch, eos_token_id=eos)
    return result.sequences, result.stats


@dataclass
class Plan:
    """What to run."""

    methods: list[str]
    batches: list[int]
    ks: list
    max_new_tokens: int
    repeats: int
    prompts_per_batch: int = 1  # prompts = this × batch (EXSPEC's case is > 1)
    min_prompts: int = 4  # so that batch 1 decodes more than one prompt
    seed: int = 0
    memory: bool = True
    warmup: int = 1  # untimed interleaved passes first: lazy initialisation and first-shape costs are not timed


@dataclass(frozen=True)
class Price:
    """A schedule entry: time the forward costs and the prefills once, at the
    start of a counted pass, so that the table is sampled over the same
    stretch of time as the runs it prices (the machine drifts by ±20% within
    a run on the 2-core CPU), not after them."""


def run(pair, plan: Plan, progress=lambda it, total: it) -> dict:
    """Run the plan; return cells, forward costs and the reference outputs."""
    count = max(max(plan.batches) * plan.prompts_per_batch, plan.min_prompts)
    pool = pair.prompts(count, plan.seed)
    with torch.no_grad():
        expected = [reference_greedy(pair.target, p, plan.max_new_tokens, pair.eos_token_id) for p in pool]
    cases = all_cases(plan.methods, plan.batches, plan.ks)
    cells = {c: Cell(c, max(c.batch * plan.prompts_per_batch, plan.min_prompts)) for c in cases}
    priced = pair.draft is not None
    prices: list[tuple] = []  # per counted pass: (Costs, {batch: {model: prefill seconds}})
    # interleaved: every case once per pass; the warm-up passes are checked but not timed
    schedule = []
    for n in range(plan.warmup + plan.repeats):
        timed = n >= plan.warmup
        schedule += ([(Price(), True)] if timed and priced else []) + [(c, timed) for c in cases]
    calibrations = calibrate(pair, cases)  # auto's forward costs, before anything is timed
    steady, probes = workload(pair.target.device), []  # the machine's own spread (bench.steadiness)
    for case, timed in progress(schedule, len(schedule)):
        if isinstance(case, Price):
            prices.append((_costs(pair, plan, pool), _prefill(pair, plan, pool, cells)))
            continue
        if timed:
            probes.append(probe(steady, pair.target.device))
        prompts = pool[: cells[case].prompts]
        seqs, timing, stats, calls = counted_case(pair, case, prompts, plan.max_new_tokens)
        cell = cells[case]
        wrong = [i for i, (got, want) in enumerate(zip(seqs, expected)) if got != want]
        cell.mismatches = sorted(set(cell.mismatches) | set(wrong))  # wrong in any pass is wrong
        if not timed:
            continue
        record(cell, timing)
        cell.tokens, cell.target_calls = sum(map(len, seqs)), calls
        if stats is not None:
            cell.stats, cell.per_round = stats.as_dict(), stats.per_round
    if plan.memory:  # last: it changes how the allocator returns memory
        for case in progress(cases, len(cases)):
            _, cells[case].peak_bytes = peak_bytes(
                lambda c=case: run_case(pair, c, pool[: cells[c].prompts], plan.max_new_tokens), pair.target.device)
    costs = median_costs([c for c, _ in prices]) if priced else None
    prefill = median_prefill([p for _, p in prices]) if priced else None
    for cell in cells.values() if priced else ():
        _price_cell(cell, costs, prefill, expected)
    return {"cells": list(cells.values()), "costs": costs, "prefill": prefill, "expected": expected,
            "steadiness": summary(probes), "calibrations": calibrations}


def record(cell: Cell, timing: Timing) -> None:
    """One repeat's times, by each clock."""
    cell.seconds.append(timing.wall)
    cell.cpu_seconds.append(timing.cpu)
    if timing.device is not None:
        cell.device_seconds.append(timing.device)


def _price_cell(cell: Cell, costs, prefill: dict, expected: list[list[int]]) -> None:
    """``cell`` priced with the median table of the passes: its forward calls
    alone, and for ours the ideal speedup for its rounds (greedy rounds, and
    the ``"auto"`` choices over one process's calibration, are the same in
    every pass). Pricing each pass with its own table instead only added
    the table's jitter: one run so priced put ``generate``'s calls at 130%
    of its measured time at batch 1."""
    b = cell.case.batch
    generate_steps = [max(len(s) for s in expected[i:i + b]) for i in range(0, cell.prompts, b)]
    paid = prefill[b]  # {"target": s, "draft": s}
    priced_generate = ideal_generate_seconds(costs, generate_steps, b, paid["target"])
    if cell.case.method == "generate":
        cell.call_seconds = priced_generate
    elif cell.per_round and cell.case.method in ("eqspec", "exspec"):
        drafted = (cell.stats or {}).get("draft_calls") != 0  # auto may decode without the draft (Spec §4.2.2)
        cell.call_seconds = ideal_speculative_seconds(costs, cell.per_round,
                                                      paid["target"] + (paid["draft"] if drafted else 0.0),
                                                      fed_in_round_1=cell.case.method == "eqspec",
                                                      deferred=cell.case.method == "eqspec", drafted=drafted)
        cell.ideal_speedup = priced_generate / cell.call_seconds


#: Passes over the cost table in each counted pass over the cases (after one untimed pass); the
#: table that prices the runs is the cell-by-cell median over those passes.
COST_REPEATS = 1


def _costs(pair, plan: Plan, pool):
    """Forward costs at every batch size of the plan, over a cache as long as
    a typical row mid-decode."""
    if pair.draft is None:
        return None
    k_max = max(as_policy(k).k_max for k in plan.ks)
    context = int(statistics.mean(map(len, pool))) + plan.max_new_tokens // 2
    tokens = sorted({n for n in (1, 2, 3, 4, 5, 7, 9, k_max + 1) if n <= k_max + 1})  # the rest interpolate
    return measure_costs(pair.target, pair.draft, plan.batches, context, tokens=tokens, repeats=COST_REPEATS)


def _prefill(pair, plan: Plan, pool, cells) -> dict:
    """Each batch size's prefill seconds per model: its static batches of the
    prompts its cells decode (every cell of a batch size decodes the same)."""
    prompts = {c.batch: cells[c].prompts for c in cells}
    batches = {b: [pool[i:i + b] for i in range(0, n, b)] for b, n in prompts.items()}
    return measure_prefill({"target": pair.target, "draft": pair.draft}, batches, repeats=COST_REPEATS)
