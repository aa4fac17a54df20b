"""``batchspec bench`` on a tiny pair: every row exact, achieved/ideal from
measured costs, a wrong output fails the run, plots and JSON written, bad
arguments rejected in one line. About 15 s."""

from __future__ import annotations

import json
import statistics

import pytest

from batchspec.bench import run as bench_run
from batchspec.bench.ideal import ideal_generate_seconds, ideal_speculative_seconds
from batchspec.cli import main
from batchspec.cli.errors import UsageError
from batchspec.reference.draft_costs import Costs

SMALL = ["bench", "--pair", "tiny-llama", "--dtype", "float64", "--batch-sizes", "1,2", "--max-new-tokens", "6",
         "--repeats", "2", "-k", "2,auto"]


@pytest.mark.slow
def test_bench_rows_are_exact_and_priced(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    plots = tmp_path / "plots"
    code = main(SMALL + ["--json", "-", "--plots", str(plots)])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    rows = document["rows"]
    got = {(r["method"], r["batch"], r["k"]) for r in rows}
    assert ("assisted", 1, None) in got and ("assisted", 2, None) not in got  # transformers refuses batch > 1
    assert {("eqspec", 2, 2), ("eqspec", 2, "auto"), ("exspec", 2, 2), ("generate", 2, None)} <= got
    for r in rows:
        assert r["exact"] == f"{r['prompts']}/{r['prompts']}" and r["repeats"] == 2
        assert r["min_s"] <= r["median_s"] <= r["max_s"]
        if r["method"] in ("eqspec", "exspec"):
            assert r["ideal"] > 0 and r["achieved_over_ideal"] == pytest.approx(r["vs_generate"] / r["ideal"])
            assert sum(r["split"].values()) == pytest.approx(1.0)
            assert r["peak_mb"] is not None
        if r["method"] in ("generate", "eqspec", "exspec"):  # priced as its calls alone, over its measured time
            assert r["in_calls"] > 0
    assert document["costs"]["target"]["2"]["3"] > 0  # k = 2 verifies 3 tokens
    probes = document["steadiness"]["seconds"]  # the fixed workload, once before every timed case
    assert len(probes) == 2 * len(rows) and min(probes) > 0
    assert sorted(p.name for p in plots.iterdir()) == ["achieved_vs_ideal.png", "exspec_group_rate.png",
                                                       "throughput.png", "time_split.png"]


def test_a_wrong_output_fails_the_run(monkeypatch, capsys):
    real = bench_run.run_case

    def corrupt(pair, case, prompts, max_new_tokens):
        seqs, seconds, stats = real(pair, case, prompts, max_new_tokens)
        if case.method == "eqspec":
            seqs = [s[:-1] + [(s[-1] + 1) % 90 + 2] for s in seqs]  # the last token of every row differs
        return seqs, seconds, stats

    monkeypatch.setattr(bench_run, "run_case", corrupt)
    code = main(["bench", "--pair", "tiny-llama", "--dtype", "float64", "--batch-sizes", "2", "--max-new-tokens",
                 "4", "--repeats", "1", "--methods", "generate,eqspec", "--no-memory"])
    captured = capsys.readouterr()
    assert code == 1
    assert "NOT EXACT: eqspec k=4 batch 2" in captured.err
    assert "0/4" in captured.out and "4/4" in captured.out


def test_ideal_prices_rounds_at_the_batch_they_had():
    costs = Costs(draft={1: 1.0, 4: 2.0}, target={1: {1: 10.0, 3: 12.0}, 4: {1: 20.0, 3: 30.0}})

    class Round:
        def __init__(self, n, rows, k, accepted):
            self.round, self.requests, self.drafted, self.accepted = n, list(range(rows)), k, accepted

    # batch 4, k = 2, one row accepted both (catch-up): 3 draft calls + a 3-token verify at batch 4
    # then batch 1, k = 2, no row accepted both: 2 draft calls + a 3-token verify at batch 1
    rounds = [Round(1, 4, 2, [2, 0, 1, 0]), Round(2, 1, 2, [1])]
    assert ideal_speculative_seconds(costs, rounds, prefill=0.0) == pytest.approx(3 * 2.0 + 30.0 + 2 * 1.0 + 12.0)
    assert ideal_speculative_seconds(costs, rounds, prefill=7.0) == pytest.approx(7.0 + 3 * 2.0 + 30.0 + 2 * 1.0 + 12.0)
    # a prefill that fed nothing: round 1's first draft call and its verify are the prefill (paid once)
    assert ideal_speculative_seconds(costs, rounds, prefill=7.0, fed_in_round_1=True) == pytest.approx(
        7.0 + 2 * 2.0 + 2 * 1.0 + 12.0)
    # greedy EQSPEC defers the catch-up to the next draft call (Spec §4.2.1): round 1 pays 2 draft calls, not 3
    assert ideal_speculative_seconds(costs, rounds, prefill=0.0, deferred=True) == pytest.approx(
        2 * 2.0 + 30.0 + 2 * 1.0 + 12.0)
    # a run without the draft (auto, Spec §4.2.2): its rounds are k' = 0 target calls, no catch-up, and
    # with a prefill that fed nothing, round 1's target call is the prefill
    plain = [Round(1, 4, 0, [0] * 4), Round(2, 4, 0, [0] * 4), Round(3, 1, 0, [0])]
    assert ideal_speculative_seconds(costs, plain, prefill=7.0, fed_in_round_1=True, deferred=True,
                                     drafted=False) == pytest.approx(7.0 + 20.0 + 10.0)
    assert ideal_speculative_seconds(costs, plain, prefill=7.0, fed_in_round_1=True, deferred=True) == \
        pytest.approx(7.0 + 20.0 + 2.0 + 10.0 + 1.0)  # with the draft: the catch-up of rounds 2 and 3
    # two static batches whose longest outputs are 5 and 3 tokens: the prefill gives each its first
    # token, then 4 and 2 one-token calls at batch 4
    assert ideal_generate_seconds(costs, [5, 3], 4, prefill=9.0) == pytest.approx(9.0 + 6 * 20.0)


def test_the_prefill_is_timed_per_static_batch_interleaved_and_summed(monkeypatch):
    """Every static batch of every batch size is timed once per pass for each
    model, passes interleaved; a short prefill (the draft's here) runs once
    untimed just before, a long one (the target's) counts its first run; a
    batch counts its median, and a batch size pays the sum over its static batches."""
    from batchspec.bench import costs

    order = []

    def timed(model, prompts):
        order.append((model, len(prompts), prompts[0][0]))
        runs = order.count(order[-1])
        if model == "t":  # long: every run counts
            slow = 50.0 if runs == 2 and prompts[0][0] == 3 else 0.0  # one slow pass of one batch
            return 10.0 * len(prompts) + runs * 0.01 + slow
        return (0.02 if runs % 2 else 0.001 * runs) * len(prompts)  # short: the odd runs are the untimed ones

    monkeypatch.setattr(costs, "_prefill_call", timed)
    batches = {2: [[[1], [2]], [[3], [4]]], 1: [[[1]]]}
    table = costs.measure_prefill({"target": "t", "draft": "d"}, batches, repeats=3)
    one_pass = [("t", 1, 1), ("d", 1, 1), ("d", 1, 1), ("t", 2, 1), ("d", 2, 1), ("d", 2, 1),
                ("t", 2, 3), ("d", 2, 3), ("d", 2, 3)]
    assert order == one_pass * 3
    assert table[1] == {"target": pytest.approx(10.02), "draft": pytest.approx(0.004)}  # medians of runs 1-3, 2/4/6
    assert table[2]["target"] == pytest.approx(20.02 + 20.03)  # medians of (20.01, 20.02, 20.03), (20.01, 70.02, 20.03)
    assert table[2]["draft"] == pytest.approx(0.008 + 0.008)


@pytest.mark.parametrize("args, message", [
    (["-k", "0"], "-k: expected comma-separated positive integers, 'auto' or 'confident', got '0'"),
    (["-k", "4,fast"], "'fast'"),
    (["--methods", "eqspec,turbo"], "--methods: unknown 'turbo'"),
])
def test_bad_arguments_are_one_line_usage_errors(capsys, args, message):
    assert main(["bench", "--pair", "tiny-llama"] + args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_cost_table_interleaves_its_passes_and_takes_medians(monkeypatch):
    """Every cell is timed once per pass before any is timed again (so no
    pass goes uncounted); a long call (0.1 s or more) counts its first run,
    a short one runs once untimed, then counts the faster of the next two;
    a cell is its median over the passes: one slow pass moves nothing."""
    from batchspec.bench import costs
    from batchspec.models import tiny

    target, draft = tiny.pair("llama", "perturbed")
    order = []

    def timed(model, ids, cache, n, context):
        cell = ("target" if model is target else "draft", ids.shape[0], n)
        order.append(cell)
        calls = order.count(cell)
        width = 1 if cell[0] == "target" and n == 3 else 3  # long calls: the first counts; short: cold + 2
        passes, within = (calls - 1) // width, (calls - 1) % width  # pass (0-based), call in it
        slow = {("target", 2, 3): 99.0, ("target", 1, 1): 0.05}.get(cell, 0.0) if passes == 1 else 0.0  # a slow pass
        if width == 1:
            return 1.0 * (1.0 + 0.01 * passes) + slow
        return 0.01 * (1.0 + 0.01 * passes) + slow + (0.03 if within == 0 else 0.001 * within)  # cold first

    monkeypatch.setattr(costs, "timed_call", timed)
    table = costs.measure_costs(target, draft, [2, 1], context=4, tokens=[1, 3], repeats=3)
    cells = [("draft", 1, 1), ("draft", 2, 1), ("target", 1, 1), ("target", 1, 3), ("target", 2, 1), ("target", 2, 3)]
    assert order == [c for c in cells for _ in range(1 if c[0] == "target" and c[2] == 3 else 3)] * 3
    assert table.target[2][3] == pytest.approx(1.02)  # median of 1.0, 100.01, 1.02: long, its first run counted
    assert table.target[1][1] == pytest.approx(0.0102 + 0.001)  # median of 0.0111, 0.0611, 0.0112: short, faster
    assert table.draft[2] == pytest.approx(0.0101 + 0.001)


def test_ratios_to_generate_are_paired_pass_by_pass():
    """``vs generate`` is the median of per-pass ratios: a machine that slows
    down for one whole pass (both runs of it) moves nothing, where a ratio of
    medians taken over different passes would."""
    from batchspec.bench import report
    from batchspec.bench.run import Case, Cell

    # pass 2 is slow for everything (drift); ours is 0.8 of generate's time in every pass
    generate = Cell(Case("generate", 4), 4, seconds=[1.0, 1.1, 3.0, 1.2, 1.3])
    ours = Cell(Case("eqspec", 4, 4), 4, seconds=[0.8 * s for s in generate.seconds])
    ours.seconds[0], ours.seconds[3] = 0.9, 1.0  # two passes where ours was slower: 1/0.9 and 1.2/1.0
    row = {r["method"]: r for r in report.rows([generate, ours])}["eqspec"]
    assert row["vs_generate"] == pytest.approx(1.25)  # median of 1.11, 1.25, 1.25, 1.2, 1.25
    assert row["vs_generate_range"] == pytest.approx([1.0 / 0.9, 1.25])
    assert row["seconds"] == ours.seconds
    unpaired = statistics.median(generate.seconds) / statistics.median(ours.seconds)
    assert unpaired != pytest.approx(row["vs_generate"])  # the ratio of medians would read 1.2
    with pytest.raises(ValueError, match="not paired"):
        report.rows([generate, Cell(Case("eqspec", 4, 4), 4, seconds=[1.0, 1.0])])


@pytest.mark.slow
def test_the_costs_are_measured_in_every_pass_and_their_median_prices_the_runs(monkeypatch):
    """The forward costs and the prefills are measured once at the start of
    every counted pass (not in the warm-up), so that the table samples the
    stretch of time the runs ran in; every pass is priced with the
    cell-by-cell median of those tables: one pass that measured its verify
    calls dearer moves nothing."""
    from types import SimpleNamespace

    from batchspec.bench.run import Plan, run
    from batchspec.cli.common import load_pair

    order = []
    verify = iter([9.0, 4.5, 4.0])  # pass 1 measured its verify calls dearer (a slow moment); median 4.5, not the last

    def costs(pair, plan, pool):
        order.append("price")
        return Costs(draft={1: 0.1, 2: 0.1}, target={b: {1: 1.0, 2: 1.0, 3: next(verify) if b == 2 else 1.0}
                                                     for b in (1, 2)})

    real = bench_run.run_case

    def case(pair, c, prompts, n):
        order.append(c.method)
        return real(pair, c, prompts, n)

    monkeypatch.setattr(bench_run, "_costs", costs)
    monkeypatch.setattr(bench_run, "_prefill", lambda *a: {2: {"target": 0.0, "draft": 0.0}})
    monkeypatch.setattr(bench_run, "run_case", case)
    pair = load_pair(SimpleNamespace(pair="tiny-llama", device="cpu", dtype="float64"))
    out = run(pair, Plan(["generate", "eqspec"], [2], [2], max_new_tokens=6, repeats=3, memory=False))
    assert order == ["generate", "eqspec"] + ["price", "generate", "eqspec"] * 3  # warm-up pass unpriced
    assert out["costs"].target[2][3] == pytest.approx(4.5)  # cell by cell medians of 9.0, 4.5, 4.0
    cell = next(c for c in out["cells"] if c.case.method == "eqspec")
    rounds = cell.per_round
    drafts = sum(r.drafted + (r.drafted == 0) for r in rounds) * 0.1  # catch-ups deferred (Spec §4.2.1)
    dear = sum(len(r.requests) == 2 and r.drafted == 2 for r in rounds)  # verify calls of 3 tokens at batch 2
    assert dear > 0
    # each static batch's first round: its first draft call and its verify are the prefills (Spec §4.1)
    firsts = [r for r in rounds if r.round == 1]
    assert len(firsts) == 2  # 2 static batches
    prefills = sum(0.1 + (4.5 if len(r.requests) == 2 and r.drafted == 2 else 1.0) for r in firsts)
    assert cell.call_seconds == pytest.approx(drafts + 4.5 * dear + (len(rounds) - dear) - prefills)  # the median table
    generate = next(c for c in out["cells"] if c.case.method == "generate")
    assert generate.call_seconds == pytest.approx(5.0 * 2)  # 2 static batches, 6 tokens: prefill + 5 calls each
    assert cell.ideal_speedup == pytest.approx(10.0 / cell.call_seconds)


def test_the_machine_line_warns_only_when_the_fixed_workload_was_unsteady():
    """The workload's spread is the table's (half the min-max range over the
    median); over 10 % the run is called unsteady, and the line says so."""
    from batchspec.bench.steadiness import line, summary

    steady = summary([0.020, 0.021, 0.020, 0.0205])
    assert steady["spread"] == pytest.approx(0.001 / 0.02025 / 2) and steady["steady"]
    assert "spread ±2%" in line(steady) and "unreliable" not in line(steady)
    shaky = summary([0.020, 0.021, 0.028, 0.020])  # one probe 40 % slow, as the development CPU did
    assert not shaky["steady"] and "spread ±20%" in line(shaky) and "unreliable" in line(shaky)
    assert summary([]) is None and line(None) is None


def test_a_real_pair_gets_a_plan_of_minutes_unless_told_otherwise():
    from types import SimpleNamespace

    from batchspec.cli.bench import fill_plan_defaults

    def plan(pair, **given):
        args = SimpleNamespace(pair=pair, batch_sizes=None, max_new_tokens=None, repeats=None, warmup=None,
                               methods=None, num_draft_tokens=None, memory=False, no_memory=False)
        args.__dict__.update(given)
        fill_plan_defaults(args)
        return (args.batch_sizes, args.max_new_tokens, args.repeats, args.warmup, args.methods,
                args.num_draft_tokens, not args.no_memory)

    small = ([1, 4, 8, 16, 32], 48, 5, 1, "generate,assisted,autoregressive,eqspec,exspec", "4", True)
    assert plan(None) == plan("default") == plan("tiny-llama") == small
    real = ([1, 4, 8], 16, 2, 0, "generate,assisted,autoregressive,eqspec", "4,auto,confident", False)
    assert plan("qwen2.5-coder") == real
    assert plan("qwen2.5-coder", max_new_tokens=32, batch_sizes=[1], memory=True, warmup=1) == (
        [1], 32, 2, 1, *real[4:6], True)
    assert plan("tiny-llama", no_memory=True)[-1] is False
    with pytest.raises(UsageError, match="--memory and --no-memory"):
        plan("tiny-llama", memory=True, no_memory=True)


def test_tokens_per_second_keep_three_significant_figures_without_an_exponent():
    from batchspec.bench.report import significant

    assert [significant(x) for x in (2.2634, 5.0, 45.67, 846.2, 1408.9, 23456.0)] == [
        "2.26", "5", "45.7", "846", "1409", "23456"]


def test_the_verdict_is_faster_or_slower_only_when_every_repeat_agrees():
    from batchspec.bench.timing import verdict

    assert verdict([1.1, 1.3, 1.05]) == "faster" and verdict([0.8, 0.95]) == "slower"
    assert verdict([0.9, 1.4, 1.2]) == "on par"  # the spread covers 1.0
    assert verdict([1.0, 1.2]) == "on par"  # a repeat at parity is not a win
    assert verdict([1.5]) is None and verdict(None) is None  # one repeat has no spread to judge


def test_rows_carry_both_clocks_and_judge_by_cpu_time_on_a_cpu():
    """A neighbour's load moved wall time (ours looks 1.2-1.6x faster), the CPU
    time says the work was on par: the verdict follows the CPU time."""
    from batchspec.bench import report
    from batchspec.bench.run import Case, Cell

    generate = Cell(Case("generate", 1), 4, seconds=[1.2, 1.6, 1.3], cpu_seconds=[1.0, 1.0, 1.0])
    ours = Cell(Case("eqspec", 1, 4), 4, seconds=[1.0, 1.0, 1.0], cpu_seconds=[0.95, 1.05, 0.9])
    row = {r["method"]: r for r in report.rows([generate, ours])}["eqspec"]
    assert row["vs_generate_range"] == pytest.approx([1.2, 1.6]) and row["verdict_clock"] == "cpu"
    assert row["vs_generate_steady_range"] == pytest.approx([1.0 / 1.05, 1.0 / 0.9])
    assert row["verdict"] == "on par" and row["cpu_seconds"] == [0.95, 1.05, 0.9]
    assert row["wall_spread"] == pytest.approx(0.0) and row["steady_spread"] == pytest.approx(0.15 / 0.95 / 2)
    ours.cpu_seconds = [0.8, 0.85, 0.9]
    rows = {r["method"]: r for r in report.rows([generate, ours])}
    assert rows["eqspec"]["verdict"] == "faster" and rows["generate"]["verdict"] is None  # not against itself
    # on a GPU the verdict uses CUDA-event time
    generate.device_seconds, ours.device_seconds = [1.0, 1.0, 1.0], [1.1, 1.2, 1.05]
    row = {r["method"]: r for r in report.rows([generate, ours])}["eqspec"]
    assert row["verdict_clock"] == "cuda" and row["verdict"] == "slower"


@pytest.mark.slow
def test_auto_calibrates_before_anything_is_timed_once_per_batch_size(monkeypatch):
    """``auto``'s forward costs are measured by the bench before its schedule,
    once per batch size for the one ``Auto`` its cases share; no timed call
    calibrates."""
    from types import SimpleNamespace

    from batchspec.bench.run import Plan, run
    from batchspec.cli.common import load_pair

    order = []
    real_case, real_calibrate = bench_run.run_case, bench_run.calibrate
    monkeypatch.setattr(bench_run, "run_case", lambda *a: order.append("case") or real_case(*a))
    monkeypatch.setattr(bench_run, "calibrate", lambda *a: order.append("calibrate") or real_calibrate(*a))
    pair = load_pair(SimpleNamespace(pair="tiny-llama", device="cpu", dtype="float64"))
    out = run(pair, Plan(["generate", "eqspec", "exspec"], [1, 2], ["auto"], max_new_tokens=6, repeats=2,
                         memory=False, warmup=0))
    assert order[0] == "calibrate" and order.count("calibrate") == 1
    assert sorted(c["batch_size"] for c in out["calibrations"]) == [1, 2]
    for cell in out["cells"]:
        assert len(cell.cpu_seconds) == len(cell.seconds) == 2 and min(cell.cpu_seconds) > 0
        if cell.stats is not None and cell.case.k == "auto":
            assert cell.stats["calibrations"] == []  # the timed calls found the memo full


@pytest.mark.slow
def test_the_table_has_a_legend_and_help_explains_the_columns(capsys):
    from batchspec.bench.report import COLUMNS

    assert main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "CPU ×gen" in text and "on par" in text and "paired per repeat" in text
    code = main(["bench", "--pair", "tiny-llama", "--dtype", "float64", "--batch-sizes", "1", "--max-new-tokens", "4",
                 "--repeats", "2", "--warmup", "0", "--methods", "generate,eqspec", "--no-memory"])
    out = capsys.readouterr().out
    assert code == 0 and "verdict uses process CPU time" in out
    assert all(head in out for _, head, _, _ in COLUMNS)


@pytest.mark.slow
def test_custom_generate_is_a_bench_method_exact_beside_eqspec_and_never_auto(capsys):
    """The path an HF user types (generate with batchspec's custom_generate folder) runs
    in the same interleaved passes as batchspec.generate, exact, at every k but auto
    (whose calibration would then fall inside a timed call)."""
    code = main(["bench", "--pair", "tiny-llama", "--batch-sizes", "1,3", "--methods", "generate,eqspec,custom_generate",
                 "-k", "2,auto,confident", "--max-new-tokens", "6", "--repeats", "1", "--no-memory", "--json", "-"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0
    got = {(r["method"], r["batch"], r["k"]) for r in rows}
    assert {("custom_generate", b, k) for b in (1, 3) for k in (2, "confident")} <= got
    assert not {(m, b, k) for m, b, k in got if m == "custom_generate" and k == "auto"}
    assert ("eqspec", 3, "auto") in got
    for r in rows:
        assert r["exact"] == f"{r['prompts']}/{r['prompts']}"
    custom = {(r["batch"], r["k"]): r["target_calls"] for r in rows if r["method"] == "custom_generate"}
    ours = {(r["batch"], r["k"]): r["target_calls"] for r in rows if r["method"] == "eqspec"}
    assert custom and all(custom[key] == ours[key] for key in custom)  # the same target calls behind the adapter
