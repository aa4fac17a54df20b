"""The README's Python blocks run as written, in order, from a folder outside the
repository (a newcomer pastes them after the install command): they cannot rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_the_readme_python_runs_when_pasted(tmp_path):
    code = blocks()
    assert len(code) >= 2  # "Use it" and "Checking your own decoder"
    script = tmp_path / "readme.py"
    script.write_text("\n".join(code))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "class Queue:" in run.stdout and "target calls" in run.stdout
    shown = re.search(r"The continuations \(`('[^`]*')`\)", (ROOT / "README.md").read_text()).group(1)
    assert shown in run.stdout.splitlines()  # the continuation the text quotes is the one printed


def test_a_broken_readme_block_would_fail(tmp_path):
    """The check can fail: the snippet as it used to be (no pair loaded) raises."""
    script = tmp_path / "old.py"
    script.write_text("import batchspec\nresult = batchspec.generate(target, draft, prompts)\n")
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "NameError" in run.stderr
