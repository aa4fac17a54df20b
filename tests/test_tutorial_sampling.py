"""Chapter 8 (speculative sampling) runs top to bottom and its assertions hold.

Once ``tutorials/harness.py`` exists (the tutorials work), it executes every
chapter, this one included, in ``tests/test_tutorials.py``; this test then
steps aside so that the chapter is not executed twice in one suite run.
About 25 s on one idle core.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "tutorials" / "08_speculative_sampling.py"


@pytest.mark.skipif((ROOT / "tutorials" / "harness.py").exists(), reason="the tutorial harness executes it")
def test_chapter_runs_and_asserts(monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", "default")
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_DEVICE", "cpu")
    monkeypatch.setattr(plt, "show", lambda *a, **k: plt.close("all"))
    runpy.run_path(str(CHAPTER), run_name="__main__")
    out = capsys.readouterr().out
    assert "row 0 under every run" in out and "speculative sampling" in out


def test_chapter_is_percent_format_and_ends_with_what_to_remember():
    text = CHAPTER.read_text()
    cells = text.split("# %%")
    assert text.startswith("# %% [markdown]\n# # 8. Speculative sampling")
    assert "BATCHSPEC_TUTORIAL_PAIR" in cells[2] and "BATCHSPEC_TUTORIAL_DEVICE" in cells[2]  # first code cell
    assert cells[-1].startswith(" [markdown]\n# ## What to remember")
