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
    assert spec["exact vs baseline"] == "3/3"
    assert 1.0 <= spec["tokens/target call"] <= 5.0
    assert spec["draft calls"] > 0 and base["draft calls"] == 0
    assert all(spec[f"{p} s"] >= 0 for p in ("draft", "verify", "align", "other"))


def test_demo_table_shows_text(capsys):
    assert main(["demo", "--prompts", "2", "--batch-size", "2", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "exact vs baseline" in out and "2/2" in out and "->" in out
