"""The tutorials execute, assert their claims, and render on the site with their pictures.

``docsbuild/harness.py`` executes each ``tutorials/NN_*.py`` once per change
(of the tutorial or of the package) into ``docs/tutorials/NN_*.ipynb``; the
docs build (``tests/docs/test_spec_docs.py``, via the harness as a mkdocs hook)
and this file share those executions, so each tutorial runs once per test
run. A cell that raises, a failed claim included, fails the harness: the
first test shows that on a two-cell notebook.

Cost: the seven tutorials together, once (their times are printed as a
table, and a warning says when they exceed the 300 s budget), plus ~5 s for
the failing notebook.
"""

from __future__ import annotations

import importlib.util
import json
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tutorial_harness", ROOT / "docsbuild" / "harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

BUDGET = 300  # seconds, all tutorials together: under 5 minutes on 2 cores
CHAPTERS = [f"{n:02d}" for n in range(1, 10)]
#: chapters that tell their story with pictures: all of them
PICTURED = CHAPTERS


@pytest.fixture(scope="module")
def executed(request):
    """``{name: seconds}``, executing whatever is stale; the times are printed."""
    times = harness.ensure_executed()
    cpu = {name: harness._recorded(harness.OUT / f"{name}.ipynb").get("cpu_seconds") for name in times}
    lines = [f"tutorial {name:<40} {seconds:6.1f} s wall, {cpu[name] or 0:6.1f} s CPU"
             for name, seconds in times.items()]
    lines.append(f"tutorials together {sum(times.values()):6.1f} s wall, "
                 f"{sum(c or 0 for c in cpu.values()):6.1f} s CPU (budget {BUDGET} s)")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # shown in every run, not only on failure
        print("\n" + "\n".join(lines))
    return times


def test_a_failing_claim_fails_the_harness(tmp_path):
    source = tmp_path / "99_broken.py"
    source.write_text("# %%\nx = 1\n\n# %%\nassert x == 2, 'the claim no longer holds'\n")
    with pytest.raises(RuntimeError, match=r"(?s)99_broken\.py failed.*the claim no longer holds"):
        harness.execute(source, tmp_path / "99_broken.ipynb")
    assert not (tmp_path / "99_broken.ipynb").exists()


def test_every_tutorial_executes(executed):
    """All nine ran (their times are printed; a time is a measurement on a
    shared machine, reported and warned about, never asserted)."""
    assert [name[:2] for name in executed] == CHAPTERS
    total = sum(executed.values())
    if total > BUDGET:
        warnings.warn(f"the tutorials took {total:.0f} s together, over the {BUDGET} s budget "
                      f"(wall-clock time; a loaded machine inflates it)")


def _notebook(name):
    return json.loads((harness.OUT / f"{name}.ipynb").read_text())


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_tutorial_tells_its_story(executed, chapter):
    """Text between short cells, a picture, its claims asserted, the setup cell first, a closing summary."""
    name = next(n for n in executed if n.startswith(chapter))
    cells = _notebook(name)["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "tutorial_setup(" in "".join(code[0]["source"])  # pair and device from the env
    assert sum("assert " in "".join(c["source"]) for c in code) >= 2
    assert all(len("".join(c["source"]).splitlines()) <= 45 for c in code), "a cell too long to follow"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs) or chapter not in PICTURED
    assert "## What to remember" in text and len(cells) >= 2 * len(code) - 1


def test_chapter_7_says_what_it_runs_on(executed):
    printed = "".join("".join(o.get("text", "")) for c in _notebook("07_real_pairs_and_gpus")["cells"]
                      for o in c.get("outputs", []))
    assert re.search(r"running on pair '[\w.-]+', device '\w+'", printed)
    assert "This notebook ran on pair" in printed  # and, on the default pair, how to run it on a real one:
    assert "BATCHSPEC_TUTORIAL_PAIR=qwen2.5-coder BATCHSPEC_TUTORIAL_DEVICE=cuda" in printed or \
        "device 'cuda" in printed


def test_tutorials_render_on_the_site_with_their_pictures(executed, docs_site):
    for name in executed:
        page = (docs_site / "tutorials" / name / "index.html").read_text()
        pictures = sum("image/png" in o.get("data", {}) for c in _notebook(name)["cells"] for o in c.get("outputs", []))
        assert page.count('src="data:image/png;base64') == pictures, name
        assert pictures > 0 or name[:2] not in PICTURED, name
        assert "Traceback" not in page and "What to remember" in page, name
    landing = (docs_site / "tutorials" / "index.html").read_text()
    assert all(f"{name}/" in landing for name in executed)
