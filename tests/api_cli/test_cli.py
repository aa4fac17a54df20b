"""The main job: ``batchspec demo`` on the embedded default pair."""

from __future__ import annotations

import json

from batchspec.cli import main


def test_demo_reports_exact_match_and_phases(capsys):
    code = main(["demo", "--prompts", "3", "--batch-size", "3", "--max-new-tokens", "12", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    base, spec = report["rows"]
    assert (base["method"], spec["method"]) == ("autoregressive", "eqspec")
    assert spec["exact"] == "3/3"
    assert 1.0 <= spec["tok/call"] <= 5.0
    assert spec["draft"] > 0 and base["draft"] == 0
    assert all(spec[f"{p} s"] >= 0 for p in ("draft", "verify", "align", "other"))
    assert spec["check s"] > 0 and base["speedup"] == "1.00x"
    # time s excludes the checks; the speedup is the baseline's time over this one
    assert spec["speedup"] == f"{base['time s'] / max(spec['time s'], 1e-9):.2f}x"


def test_demo_table_shows_text(capsys):
    assert main(["demo", "--prompts", "2", "--batch-size", "2", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "exact" in out and "speedup" in out and "2/2" in out and "->" in out
    assert max(map(len, out.splitlines()[:8])) <= 100
