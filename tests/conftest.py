"""Shared fixtures: tiny float64 model pairs and their batch-1 greedy references."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from batchspec.models import tiny
from batchspec.testing import reference_greedy

torch.set_num_threads(1)  # tiny models: per-call overhead dominates; one thread avoids oversubscription

DOCS = Path(__file__).resolve().parent / "docs"


def pytest_collection_modifyitems(items):
    """The ``docs`` marker, set once: every test in tests/docs/, and any test that
    builds the site (the ``docs_site`` fixture), so ``-m "not docs"`` leaves the build out."""
    for item in items:
        if Path(item.fspath).is_relative_to(DOCS) or "docs_site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docs)


@pytest.fixture(scope="session")
def pairs():
    """``pairs(family, draft)``: cached tiny float64 pairs."""
    cache = {}

    def get(family: str, draft: str = "perturbed"):
        if (family, draft) not in cache:
            cache[family, draft] = tiny.pair(family, draft)
        return cache[family, draft]

    return get


@pytest.fixture(scope="session")
def greedy_reference():
    """``greedy_reference(target, prompt, n, eos)``: cached ``target.generate`` at batch 1."""
    cache = {}

    def get(target, prompt, n, eos=None):
        key = (id(target), tuple(prompt), n, tuple(eos) if isinstance(eos, list) else eos)
        if key not in cache:
            # keep the model alive with its entry: a freed model's id is reused by the next
            # one built, which would then read this model's references
            cache[key] = (target, reference_greedy(target, prompt, n, eos))
        return cache[key][1]

    return get



@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """The docs site, built once per test run with ``mkdocs build --strict`` and shared by
    every test that reads it (the spec/API page checks and the browser test)."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                         cwd=Path(__file__).resolve().parent.parent, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return out
