"""Packaging: one import namespace, installed, and invariants/ independent of reference/."""

from __future__ import annotations

import pytest
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_installed_package_imports_from_outside_the_repository(tmp_path):
    code = ("import batchspec, batchspec.reference, batchspec.invariants, batchspec.models;"
            "print(batchspec.generate.__module__, batchspec.invariants.INVARIANTS[0][0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["batchspec.api", "I1"]


def test_invariants_do_not_import_reference():
    for path in (ROOT / "invariants").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            for name in names:
                assert "reference" not in name, f"{path.name} imports {name}"
                assert not name.startswith(".."), f"{path.name} reaches outside invariants/: {name}"


def test_cache_api_is_touched_in_one_module_only():
    """Only reference/storage.py may name transformers' cache classes or reach into
    their layers, and only reference/model_call.py may call a model with one (model
    wrappers may pass a cache object through unchanged): the moves and EXSPEC's rows
    work on the storage's Store. The checker, which must read any decoder's caches, reads
    them through transformers' public per-layer API in invariants/hf_cache.py alone."""
    needles = ("DynamicCache", "past_key_values", ".crop(", "cache.layers", "get_seq_length", "cache_utils")
    offenders = []
    for folder in ("batchspec", "reference", "invariants"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name in ("storage.py", "model_call.py") and path.parent.name == "reference":
                continue
            if path.parent.name == "examples":  # decoders written as outsiders would, on stock caches
                continue
            if path.name == "hf_cache.py" and path.parent.name == "invariants":
                continue
            text = path.read_text()
            if path.name == "hf_refusals.py":  # it names the generate argument it refuses, and reads no cache
                text = text.replace('refuse("past_key_values",', "")
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in needles if n in text]
    assert offenders == []
