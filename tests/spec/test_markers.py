"""The markers of the test suite (Contributing §2): ``slow_except`` keeps the cases it
names in the core loop and fails on a pattern that names none; ``exhaustive`` selects
only when ``-m`` names it. Run on a planted test file, in a fresh pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"
MARKERS = """[tool.pytest.ini_options]
addopts = "-p no:cacheprovider -p no:xdist"
markers = ["docs: d", "slow: s", "slow_except(*ids): e", "exhaustive: x", "realpair: r", "gpu: g"]
"""
PLANTED = """import pytest

@pytest.mark.slow_except("b-*", "{pattern}")
@pytest.mark.parametrize("x", ["a-1", "b-1", "b-2", "c-1"])
def test_cases(x):
    pass

@pytest.mark.exhaustive
def test_everything():
    pass

def test_plain():
    pass
"""


def collect(tmp_path: Path, pattern: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "pyproject.toml").write_text(MARKERS)
    (tmp_path / "test_planted.py").write_text(PLANTED.format(pattern=pattern))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_slow_except_keeps_its_cases_in_the_core_loop_and_exhaustive_is_opt_in(tmp_path):
    core = collect(tmp_path, "c-1", "-m", "not docs and not slow")
    assert core.returncode == 0, core.stdout + core.stderr
    kept = [line.split("::")[1] for line in core.stdout.splitlines() if "::" in line]
    assert kept == ["test_cases[b-1]", "test_cases[b-2]", "test_cases[c-1]", "test_plain"]
    full = collect(tmp_path, "c-1")
    assert "test_cases[a-1]" in full.stdout and "test_everything" not in full.stdout
    named = collect(tmp_path, "c-1", "-m", "exhaustive")
    assert [line for line in named.stdout.splitlines() if "::" in line] == ["test_planted.py::test_everything"]


@pytest.mark.slow
def test_a_slow_except_pattern_that_names_no_case_is_an_error(tmp_path):
    typo = collect(tmp_path, "d-1", "-m", "not slow")
    assert typo.returncode != 0
    assert "slow_except: no case matches ['d-1'] of test_planted.py::test_cases" in typo.stdout + typo.stderr
