"""Shared fixtures: tiny float64 model pairs and their batch-1 greedy references."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from batchspec.models import tiny
from batchspec.testing import reference_greedy

torch.set_num_threads(1)  # tiny models: per-call overhead dominates; one thread avoids oversubscription

DOCS = Path(__file__).resolve().parent / "docs"


#: markers a run selects only when its ``-m`` names them (``-m exhaustive``, ``-m realpair``):
#: the full exhaustive enumeration, the real pair, a CUDA device
OPT_IN = ("exhaustive", "realpair", "gpu")


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers, and before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Markers set once, so that the plain ``python -m pytest`` runs what CI runs and
    ``-m "not docs and not slow"`` the core loop (Contributing §2):

    * ``docs``: every test in tests/docs/, and any test that builds the site (the
      ``docs_site`` fixture); they share one xdist group, so that one worker builds
      the site once (``-n auto --dist loadgroup`` in pyproject.toml);
    * ``slow`` on every case of a test marked ``slow_except(*ids)`` but the cases whose
      id matches one of ``ids`` (``fnmatch`` patterns, as ``--collect-only -q`` prints
      them): those few stay in the core loop; a pattern that matches no case is an error;
    * the :data:`OPT_IN` markers deselected unless ``-m`` names them."""
    patterns: dict = {}
    for item in items:
        if Path(item.fspath).is_relative_to(DOCS) or "docs_site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docs)
            item.add_marker(pytest.mark.xdist_group("docs"))
        mark = item.get_closest_marker("slow_except")
        if mark is not None:
            case = item.callspec.id
            matched = [p for p in mark.args if fnmatch.fnmatchcase(case, p)]
            patterns.setdefault(item.nodeid.split("[")[0], (item.nodeid, set(mark.args)))[1].difference_update(matched)
            if not matched:
                item.add_marker(pytest.mark.slow)
    unmatched = {name: (where, left) for name, (where, left) in patterns.items() if left}
    if unmatched:
        raise pytest.UsageError("slow_except: no case matches " + "; ".join(
            f"{sorted(left)} of {where.split('[')[0]}" for where, left in unmatched.values()))
    named = config.option.markexpr or ""
    keep = [item for item in items if not any(
        item.get_closest_marker(m) and not re.search(rf"(?<!not ){m}\b", named) for m in OPT_IN)]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


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
