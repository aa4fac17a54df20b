"""The hand-written site pages say what the code does: the quickstart's code runs as printed.

Its blocks run in one namespace, in order, as a reader pasting them would
(the default pair in float64, three prompts, 24 new tokens: a few seconds).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
TEXT_BLOCK = re.compile(r"prints\n\n```text\n(.*?)```", re.S)
INLINE_PRINT = re.compile(r"prints `([^`]+)`")


def test_quickstart_runs_as_printed(capsys):
    blocks = PYTHON_BLOCK.findall((ROOT / "docs" / "quickstart.md").read_text())
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/quickstart.md", "exec"), namespace)  # the second block asserts exactness
    printed = capsys.readouterr().out.splitlines()
    page = (ROOT / "docs" / "quickstart.md").read_text()
    # float64 on CPU: the page shows the exact output, and this keeps it so
    assert printed[:3] == TEXT_BLOCK.findall(page)[0].splitlines()
    assert printed[3:] == INLINE_PRINT.findall(page)
    assert namespace["stats"].tokens_per_target_call > 1  # speculation did something
