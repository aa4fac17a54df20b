"""Tutorial chapter 9 runs as a script and its asserted claims hold (float64, CPU; ~7 s).

Once the tutorials harness (branch ``tutorials``) executes every chapter, this
file duplicates that run for chapter 9 and can go."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_chapter_9_runs_and_asserts(monkeypatch):
    monkeypatch.chdir(ROOT / "tutorials")
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", "default")
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_DEVICE", "cpu")
    source = (ROOT / "tutorials" / "09_check_your_own_decoder.py").read_text()
    assert source.startswith("# %% [markdown]") and "## What to remember" in source.split("# %%")[-1]
    namespace = runpy.run_path(str(ROOT / "tutorials" / "09_check_your_own_decoder.py"))
    assert namespace["out"] == namespace["expected"]
