"""The tutorials, and so the test suite and the docs build, run on the pair they are told
to use, whatever lies in the user's cache.

Tutorial 7 used to take the Qwen2.5-Coder pair by itself once it was fetched, in
float64 (19 GB), and the harness's cache key did not notice. Here a fake fetched
pair (converted-looking folders whose weights cannot load) sits in
``$BATCHSPEC_CACHE``: the registry calls it available, and any attempt to load
it fails, so a tutorial that took it unasked would fail here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jupytext
import pytest

from batchspec.models import fetch, registry
from batchspec.viz.setup import chosen_pair

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tutorial_harness", ROOT / "docsbuild" / "harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


@pytest.fixture
def fetched_cache(tmp_path, monkeypatch):
    """``$BATCHSPEC_CACHE`` holding a "fetched" Qwen2.5-Coder pair that cannot load; no tutorial variables."""
    for role in ("target", "draft"):
        folder = fetch.pair_dir(tmp_path) / role
        folder.mkdir(parents=True)
        for name in (fetch.MARKER, "config.json", "model.safetensors"):
            (folder / name).write_text("{}")
    monkeypatch.setenv("BATCHSPEC_CACHE", str(tmp_path))
    for name in harness.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    assert registry.availability(fetch.PAIR_NAME)[0]  # the registry takes it for fetched
    return tmp_path


def test_a_fetched_pair_is_chosen_only_when_asked(fetched_cache, monkeypatch):
    assert chosen_pair() == ("default", "cpu", [])
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", fetch.PAIR_NAME)
    assert chosen_pair() == (fetch.PAIR_NAME, "cpu", [])


def test_tutorial_7_runs_on_the_default_pair_with_a_fetched_pair_in_the_cache(fetched_cache, monkeypatch, capsys):
    first = next(c for c in jupytext.read(ROOT / "tutorials" / "07_real_pairs_and_gpus.py").cells
                 if c.cell_type == "code")
    scope = {}
    exec(compile(first.source, "07_real_pairs_and_gpus.py", "exec"), scope)
    printed = capsys.readouterr().out
    assert f"{fetch.PAIR_NAME:<15} available" in printed  # it saw the pair ...
    assert scope["setup"].pair == "default" and scope["setup"].device == "cpu"  # ... and did not take it
    assert str(fetched_cache) not in printed and str(ROOT) not in printed  # no build-machine path
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", fetch.PAIR_NAME)  # asked for, it is taken (and fails to load)
    with pytest.raises(Exception):
        exec(compile(first.source, "07_real_pairs_and_gpus.py", "exec"), {})


def test_the_harness_key_records_which_pair_runs(fetched_cache, monkeypatch, tmp_path_factory):
    source = ROOT / "tutorials" / "07_real_pairs_and_gpus.py"
    unasked = harness.key(source)
    monkeypatch.setenv("BATCHSPEC_CACHE", str(tmp_path_factory.mktemp("empty")))
    assert harness.key(source) == unasked  # the cache's content alone changes nothing
    monkeypatch.setenv("BATCHSPEC_TUTORIAL_PAIR", fetch.PAIR_NAME)
    assert harness.selected() == ("default", "cpu")  # asked for but absent: the default runs
    absent = harness.key(source)
    monkeypatch.setenv("BATCHSPEC_CACHE", str(fetched_cache))
    assert harness.selected() == (fetch.PAIR_NAME, "cpu")
    assert harness.key(source) != absent  # same request, now another pair runs: re-execute
