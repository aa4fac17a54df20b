"""The pages "On a real pair" (docs/real-pair/): notebooks executed once on the
Qwen2.5-Coder pair and committed, rendered by the docs build without running.
Their outputs must be what their tutorial's code prints: a page whose tutorial
changed since it ran fails here (docsbuild/real_pair.py: stale)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("real_pair", ROOT / "docsbuild" / "real_pair.py")
real_pair = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real_pair)
PAGES = [real_pair.OUT / f"{stem}.ipynb" for stem in real_pair.TUTORIALS]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem[:2])
def test_each_page_shows_its_tutorials_code_run_on_the_real_pair(page):
    assert page.is_file(), f"{page.name} was never made: python docsbuild/real_pair.py"
    assert real_pair.stale(page) is None
    notebook = nbformat.read(page, as_version=4)
    made = notebook.metadata["batchspec_real_pair"]
    assert (made["pair"], made["dtype"]) == ("qwen2.5-coder", "float32")
    assert made["date"] in notebook.cells[1].source and made["command"] in notebook.cells[1].source
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in outputs)
    assert "running on pair 'qwen2.5-coder', device 'cpu', float32" in printed  # no fallback
    assert str(ROOT) not in printed and str(Path.home()) not in printed  # no build-machine paths


def test_a_changed_tutorial_or_an_edited_page_is_stale(tmp_path):
    page = PAGES[0]
    source = ROOT / "tutorials" / f"{page.stem}.py"
    copy = tmp_path / source.name
    copy.write_text(source.read_text() + "\n# %%\nprint('one more cell')\n")
    assert "changed since the page was executed" in real_pair.stale(page, tmp_path)
    copy.write_text(source.read_text() + "\n# %% [markdown]\n# Prose may change freely.\n")
    assert real_pair.stale(page, tmp_path) is None
    notebook = nbformat.read(page, as_version=4)
    code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    code.source += "\nprint('edited by hand')"
    edited = tmp_path / "edited" / page.name
    edited.parent.mkdir()
    nbformat.write(notebook, edited)
    shutil.copy(source, edited.parent / source.name)
    assert "are not the code of" in real_pair.stale(edited, edited.parent)


def test_the_tutorials_precision_comes_from_the_environment(monkeypatch):
    import torch

    from batchspec.viz.setup import asked_dtype

    monkeypatch.delenv("BATCHSPEC_TUTORIAL_DTYPE", raising=False)
    assert asked_dtype() == torch.float64
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_DTYPE", "float32")
    assert asked_dtype() == torch.float32
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_DTYPE", "fp8")
    with pytest.raises(ValueError, match="BATCHSPEC_TUTORIAL_DTYPE='fp8' is not a precision"):
        asked_dtype()
