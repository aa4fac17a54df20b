"""The hand-written site pages say what the code does: the quickstart's code runs as printed.

Its blocks run in one namespace, in order, as a reader pasting them would
(the default pair in float64, three prompts, 24 new tokens: a few seconds).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_quickstart_runs_as_printed(capsys):
    blocks = PYTHON_BLOCK.findall((ROOT / "docs" / "quickstart.md").read_text())
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/quickstart.md", "exec"), namespace)  # the second block asserts exactness
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("'class Queue:") and len(printed) == 4
    assert re.fullmatch(r"\d\.\d\d tokens per target call, acceptance 0\.\d\d", printed[-1])
    assert namespace["stats"].tokens_per_target_call > 1  # speculation did something
