"""The scripts in ``benchmarks/`` still run (Contributing §5.7): each answers
``--help`` and refuses a count of 0 by name (``benchmarks/options.py``), and
on a tiny pair ``check_overhead.py`` prints every figure of its table (``--json``)
and its growth line, and ``checker_ab.py`` compares two checkers. No timing is asserted:
the figures are the benchmarks' to print (and vary with the machine); these
tests check that they are there and consistent. About 60 s on two cores, out of
the core loop."""

from __future__ import annotations

import json
import math
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__"' in p.read_text())
pytestmark = pytest.mark.slow  # (each test starts Python with torch at least once)
TINY = ["--pair", "tiny-llama", "--batch", "2", "--k", "2", "--repeat", "1"]
GIT = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")


def _run(script: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_every_script_with_a_command_line_answers_help(monkeypatch, capsys):
    assert {"check_overhead.py", "checker_ab.py", "hf_generate.py"} <= {p.name for p in SCRIPTS}
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    for script in SCRIPTS:
        monkeypatch.setattr(sys, "argv", [str(script), "--help"])
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(script), run_name="__main__")
        out = capsys.readouterr().out
        assert done.value.code == 0 and out.startswith("usage:"), script.name


def _count_options(script: Path) -> list:
    """The options of ``script`` read with the shared count type (``type=positive``)."""
    return [line.split('"')[1] for line in script.read_text().splitlines()
            if "add_argument(" in line and "type=positive" in line]


def test_every_count_option_refuses_zero_by_name(monkeypatch, capsys):
    """Each script's count options (a batch, k, tokens, runs, threads) refuse 0 in argparse,
    naming the option, before any model loads; a count read with a bare ``int`` would not."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    counted = {script.name: _count_options(script) for script in SCRIPTS}
    assert len(counted) >= 10 and "watch_real_pair.py" in counted
    assert all("type=int" not in s.read_text() for s in SCRIPTS), "a count read as a bare int"
    assert all(counted.values()), [name for name, options in counted.items() if not options]
    for script in SCRIPTS:
        for option in counted[script.name]:
            monkeypatch.setattr(sys, "argv", [str(script), option, "0"])
            with pytest.raises(SystemExit) as done:
                runpy.run_path(str(script), run_name="__main__")
            assert done.value.code == 2, (script.name, option)
            assert f"argument {option}: 0 is less than 1" in capsys.readouterr().err, (script.name, option)


@pytest.mark.parametrize("script, argv, named", [  # counts, lengths, sizes, pairs, decoders, token ids
    ("check_overhead.py", ["--max-new-tokens", "32,x"], "--max-new-tokens: '32,x': 'x' is not a whole number"),
    ("check_overhead.py", ["--mmap-threshold", "many"], "--mmap-threshold: 'many' is not a whole number"),
    ("check_overhead.py", ["--max-new-tokens", "32,0"], "--max-new-tokens: '32,0': 0 is less than 1"),
    ("check_overhead.py", ["--repeat", "0"], "--repeat: 0 is less than 1"),
    ("check_overhead.py", ["--mmap-threshold", "-1"], "--mmap-threshold: -1 is less than 0"),
    ("check_overhead.py", ["--decoders", "eqspec,mine"], "unknown decoder(s) ['mine']"),
    ("checker_ab.py", ["--repeat", "0"], "--repeat: 0 is less than 1"),
    ("checker_ab.py", ["--batch", "two"], "--batch: 'two' is not a whole number"),
    ("check_overhead.py", ["--pair", "bogus"], "--pair: unknown pair 'bogus': use default or tiny-<family>"),
    ("checker_ab.py", ["--pair", "tiny-nope"], "--pair: unknown pair 'tiny-nope': use default or tiny-<family>"),
    ("watch_real_pair.py", ["--eos", "151643,end"], "--eos: '151643,end': 'end' is not a whole number"),
])
def test_bad_options_are_refused_by_name_before_any_model_runs(script, argv, named):
    done = _run(script, *argv)
    assert done.returncode != 0 and named in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_check_overhead_prints_every_figure_of_the_cost_bounds():
    done = _run("check_overhead.py", *TINY, "--max-new-tokens", "6", "--no-layout", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout.strip().splitlines()[-1])["watch"]
    assert [(r["decoder"], r["new tokens"]) for r in rows] == [
        ("eqspec", 6), ("outside decoder", 6), ("holes decoder", 6)]
    for r in rows:
        assert r["calls"] > 0
        for key in ("check/decode cpu %", "check/decode wall %", "check ms/call cpu", "decode ms/call cpu",
                    "peak ratio", "peak MiB", "unwatched peak MiB"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["decoder"], key, r[key])
        for key in ("whole run cpu %", "whole run wall %", "peak ratio above base"):  # (may fall below zero)
            assert math.isfinite(r[key]), (r["decoder"], key, r[key])
        assert 0 <= r["re-read ms/call cpu"] <= r["check ms/call cpu"]
        assert r["hashed columns/call"] >= 1  # every call writes a column: its first input's
        assert r["cpu % range"] == [r["check/decode cpu %"]] * 2  # one round: its own share, both ends


def test_check_overhead_table_names_the_growth_per_call():
    done = _run("check_overhead.py", *TINY, "--max-new-tokens", "4,8", "--no-layout", "--decoders", "eqspec")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split()[:2] == ["eqspec", "4"] for line in lines)
    assert any(line.split()[:2] == ["eqspec", "8"] for line in lines)
    assert any("ms/call at 8 over at 4:" in line and "without the re-read:" in line
               and "columns hashed a call:" in line for line in lines)


@GIT
def test_checker_ab_compares_two_checkers_on_one_pair():
    done = _run("checker_ab.py", *TINY, "--repeat", "2", "--max-new-tokens", "4", "--decoders", "eqspec,holes decoder")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "working tree / base:" in line]
    assert [line.strip().split("  ")[0] for line in lines] == ["eqspec", "holes decoder"]
    for line in lines:
        assert "base " in line and "working tree " in line
        ratio = float(line.split("working tree / base:")[1].split()[0])
        assert math.isfinite(ratio) and ratio > 0


@GIT
def test_checker_ab_names_a_revision_git_does_not_know_before_loading_a_pair(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import alignment_overhead

    def loaded(name):
        raise AssertionError(f"the pair {name} was loaded before the revision was read")

    monkeypatch.setattr(alignment_overhead, "load", loaded)
    monkeypatch.setattr(sys, "argv", ["checker_ab.py", "--pair", "tiny-llama", "--base", "no-such-revision"])
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(BENCHMARKS / "checker_ab.py"), run_name="__main__")
    finally:
        torch.set_num_threads(threads)  # (the script runs on one thread)
    assert str(done.value.code).startswith("git archive no-such-revision invariants:")
