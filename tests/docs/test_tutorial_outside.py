"""A tutorial runs from any folder after a plain install: no import from tests/, no
path relative to the repository. Tutorial 9 used to fail there (it imported the
outside decoder from tests/); it now imports it from ``batchspec.examples``."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]


def test_tutorial_9_runs_from_a_folder_outside_the_repository(tmp_path):
    notebook = jupytext.read(ROOT / "tutorials" / "09_check_your_own_decoder.py")
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # raises on a failing cell
    nbformat.write(notebook, tmp_path / "09.ipynb")
    printed = "".join(str(o.get("text", "")) for c in notebook.cells if c.cell_type == "code" for o in c.outputs
                      if o.get("name") == "stdout")
    assert "watched" in printed and "no violation" in printed and "C1 one_chain violated" in printed
    assert str(ROOT) not in printed  # what the tutorial prints names no path of the repository
