"""Execute the tutorials once, for the test suite and for the docs site.

Each ``tutorials/NN_name.py`` (jupytext percent format) is executed top to
bottom in a fresh kernel and written, with its outputs and pictures, to
``docs/tutorials/NN_name.ipynb`` (git-ignored), which mkdocs-jupyter renders
without executing again. A cell that raises (a failed ``assert`` included)
stops the run with the tutorial's name and the cell's error.

One execution serves both consumers: the notebook's metadata records a key
(a hash of the tutorial and of every source file of the package) and the
seconds it took; :func:`ensure_executed` re-runs only the tutorials whose key
changed. ``tests/docs/test_tutorials.py`` calls it and reports each tutorial's
time; ``mkdocs build`` calls it from :func:`on_pre_build` (this file is a
mkdocs hook), so whichever runs first executes and the other reads.
"""

from __future__ import annotations

import hashlib
import logging
import os
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("mkdocs.plugins.batchspec.tutorials")  # mkdocs shows its INFO lines
SOURCES = ROOT / "tutorials"
OUT = ROOT / "docs" / "tutorials"
PACKAGE = [ROOT / "batchspec", ROOT / "reference", ROOT / "invariants"]
TIMEOUT = 300  # seconds per cell: far above any cell's need; a hung cell fails the build


def tutorials() -> list[Path]:
    """The tutorial sources, in chapter order."""
    return sorted(p for p in SOURCES.glob("[0-9][0-9]_*.py"))


#: the environment a tutorial reads in its first cell (batchspec.viz.tutorial_setup)
ENVIRONMENT = ("BATCHSPEC_TUTORIAL_PAIR", "BATCHSPEC_TUTORIAL_DEVICE", "BATCHSPEC_TUTORIAL_DTYPE")


def selected() -> tuple[str, str]:
    """The pair and device the tutorials will run on here: what :data:`ENVIRONMENT`
    asks for if it is available, else the default pair on CPU
    (``batchspec.viz.setup.chosen_pair``; a cached real pair is never taken unasked)."""
    from batchspec.viz.setup import chosen_pair

    pair, device, _ = chosen_pair()
    return pair, device


def key(source: Path) -> str:
    """Hash of the tutorial, of every package source file it may exercise, of the
    pair/device it is asked to run on, and of the pair/device it will run on
    (the same request runs elsewhere once the pair asked for is fetched)."""
    digest = hashlib.sha256(source.read_bytes())
    digest.update(repr([os.environ.get(name) for name in ENVIRONMENT]).encode())
    digest.update(repr(selected()).encode())
    for folder in PACKAGE:
        for path in sorted(folder.rglob("*.py")):
            digest.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def _recorded(target: Path) -> dict:
    import nbformat

    if not target.is_file():
        return {}
    try:
        return nbformat.read(target, as_version=4).metadata.get("batchspec", {})
    except Exception:  # an unreadable leftover is re-executed, never trusted
        return {}


def execute(source: Path, target: Path, timeout: int = TIMEOUT) -> float:
    """Run ``source`` in a fresh kernel, write the executed notebook to ``target``;
    seconds taken. ``timeout``: seconds per cell."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    start, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        _kernel_environment()
        # The kernel logs errors only: its one warning (a loopback connection without
        # encryption) said nothing about the tutorial and filled the build log nine times.
        NotebookClient(notebook, timeout=timeout, kernel_name="python3", extra_arguments=["--log-level=ERROR"],
                       resources={"metadata": {"path": str(ROOT)}}).execute()
    except CellExecutionError as error:
        raise RuntimeError(f"tutorial {source.name} failed:\n{error}") from None
    seconds = time.perf_counter() - start
    # The kernel is a child process that has exited by now: its CPU time is what the
    # tutorial costs whatever else loads the machine (wall-clock time is not).
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime
    notebook.metadata["batchspec"] = {"key": key(source), "seconds": round(seconds, 2),
                                      "cpu_seconds": round(cpu, 2)}
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return seconds


def _kernel_environment() -> None:
    """What the kernels inherit: one thread per kernel (the models are small and
    CI's cores are shared, so more threads only contend). Nothing is silenced:
    a warning a reader running the notebook would see is fixed where it arises
    (tests/docs/test_docs_artefacts.py fails on one)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def ensure_executed(force: bool = False) -> dict[str, float]:
    """Execute every tutorial whose recorded key is stale (all when ``force``).
    Returns ``{name: seconds}`` as recorded."""
    OUT.mkdir(parents=True, exist_ok=True)
    stale = [source for source in tutorials()
             if force or _recorded(OUT / f"{source.stem}.ipynb").get("key") != key(source)]
    for n, source in enumerate(stale, 1):  # a cold run takes minutes: one line per tutorial says how far
        seconds = execute(source, OUT / f"{source.stem}.ipynb")
        LOG.info("tutorial %d of %d executed: %s (%.0f s)", n, len(stale), source.name, seconds)
    times = {source.stem: _recorded(OUT / f"{source.stem}.ipynb")["seconds"] for source in tutorials()}
    return times


def on_pre_build(config, **kwargs) -> None:
    """mkdocs hook: make sure the executed notebooks are there and current."""
    ensure_executed()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, seconds in ensure_executed(force=True).items():
        cpu = _recorded(OUT / f"{name}.ipynb").get("cpu_seconds")
        print(f"{name:<40} {seconds:6.1f} s wall, {cpu:6.1f} s CPU")
