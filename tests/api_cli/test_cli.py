"""The main job: ``batchspec demo`` on the embedded default pair."""

from __future__ import annotations

import pytest
import json
import statistics

from batchspec.cli import main


@pytest.mark.slow
def test_demo_reports_exact_match_and_phases(capsys):
    code = main(["demo", "--prompts", "3", "--batch-size", "3", "--max-new-tokens", "12", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    base, spec = report["rows"]
    assert (base["method"], spec["method"]) == ("autoregressive", "eqspec")
    assert spec["exact"] == "3/3"
    assert 1.0 <= spec["tok/call"] <= 5.0
    assert spec["draft"] > 0 and base["draft"] == 0
    assert all(spec[f"{p} s"] >= 0 for p in ("draft", "verify", "realign", "other"))
    assert spec["check s"] > 0 and base["speedup"] == "1.00x"
    # timed passes run unchecked, interleaved; the speedup is the median of the baseline's time over this
    # one, paired pass by pass, by process CPU time (on a CPU); time s is the median wall time
    assert report["threads"] == 1 and report["clock"] == "process CPU time" and report["repeats"] == 3
    assert len(base["cpu s per pass"]) == len(spec["cpu s per pass"]) == 3
    ratios = [b / s for b, s in zip(base["cpu s per pass"], spec["cpu s per pass"])]
    assert spec["speedup"] == f"{statistics.median(ratios):.2f}x" and spec["speedup range"] == [min(ratios), max(ratios)]
    assert spec["time s"] == round(statistics.median(spec["time s per pass"]), 3)


@pytest.mark.slow
def test_demo_table_shows_text(capsys):
    assert main(["demo", "--prompts", "2", "--batch-size", "2", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "exact" in out and "speedup" in out and "2/2" in out and "->" in out
    assert max(map(len, out.splitlines()[:8])) <= 100
