"""Execute the tutorials once, for the test suite and for the docs site.

Each ``tutorials/NN_name.py`` (jupytext percent format) is executed top to
bottom in a fresh kernel and written, with its outputs and pictures, to
``docs/tutorials/NN_name.ipynb`` (git-ignored), which mkdocs-jupyter renders
without executing again. A cell that raises (a failed ``assert`` included)
stops the run with the tutorial's name and the cell's error.

One execution serves both consumers: the notebook's metadata records a key
(a hash of the tutorial and of every source file of the package) and the
seconds it took; :func:`ensure_executed` re-runs only the tutorials whose key
changed. ``tests/test_tutorials.py`` calls it and reports each tutorial's
time; ``mkdocs build`` calls it from :func:`on_pre_build` (this file is a
mkdocs hook), so whichever runs first executes and the other reads.

Chapter slots that another piece of work fills (:data:`SLOTS`) get a
one-cell placeholder notebook until their ``.py`` exists, so the nav builds.
"""

from __future__ import annotations

import hashlib
import os
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tutorials"
OUT = ROOT / "docs" / "tutorials"
PACKAGE = [ROOT / "batchspec", ROOT / "reference", ROOT / "invariants"]
TIMEOUT = 300  # seconds per cell: far above any cell's need; a hung cell fails the build
#: name -> (title, what will fill it), for chapters other work writes
SLOTS = {
    "08_speculative_sampling": ("Speculative sampling", "the speculative-sampling work (sampled verification, I8)"),
    "09_check_your_own_decoder": ("Check your own decoder", "the conformance-checker work"),
}


def tutorials() -> list[Path]:
    """The tutorial sources, in chapter order."""
    return sorted(p for p in SOURCES.glob("[0-9][0-9]_*.py"))


#: the environment a tutorial reads in its first cell (batchspec.viz.tutorial_setup)
ENVIRONMENT = ("BATCHSPEC_TUTORIAL_PAIR", "BATCHSPEC_TUTORIAL_DEVICE")


def key(source: Path) -> str:
    """Hash of the tutorial, of every package source file it may exercise, and
    of the pair/device it is asked to run on."""
    digest = hashlib.sha256(source.read_bytes())
    digest.update(repr([os.environ.get(name) for name in ENVIRONMENT]).encode())
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


def execute(source: Path, target: Path) -> float:
    """Run ``source`` in a fresh kernel, write the executed notebook to ``target``; seconds taken."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    start, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        _kernel_environment()
        NotebookClient(notebook, timeout=TIMEOUT, kernel_name="python3",
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
    CI's cores are shared, so more threads only contend), and no warning that
    tqdm's notebook bars lack ipywidgets (nothing here draws a bar)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("PYTHONWARNINGS", "ignore:IProgress not found")


def placeholder(name: str, title: str, owner: str) -> None:
    """A one-cell notebook that holds a chapter's place in the nav."""
    import nbformat

    target = OUT / f"{name}.ipynb"
    text = (f"# {title}\n\nThis chapter comes with {owner}; it is not in this build yet. "
            f"Its source will be `tutorials/{name}.py`.")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    notebook.metadata["batchspec"] = {"placeholder": True}
    nbformat.write(notebook, target)


def ensure_executed(force: bool = False) -> dict[str, float]:
    """Execute every tutorial whose recorded key is stale (all when ``force``);
    fill the empty slots. Returns ``{name: seconds}`` as recorded."""
    OUT.mkdir(parents=True, exist_ok=True)
    times = {}
    for source in tutorials():
        target = OUT / f"{source.stem}.ipynb"
        recorded = _recorded(target)
        if force or recorded.get("key") != key(source):
            execute(source, target)
            recorded = _recorded(target)
        times[source.stem] = recorded["seconds"]
    for name, (title, owner) in SLOTS.items():
        if not (SOURCES / f"{name}.py").is_file() and not _recorded(OUT / f"{name}.ipynb").get("placeholder"):
            placeholder(name, title, owner)
    return times


def on_pre_build(config, **kwargs) -> None:
    """mkdocs hook: make sure the executed notebooks are there and current."""
    ensure_executed()


if __name__ == "__main__":
    for name, seconds in ensure_executed(force=True).items():
        cpu = _recorded(OUT / f"{name}.ipynb").get("cpu_seconds")
        print(f"{name:<40} {seconds:6.1f} s wall, {cpu:6.1f} s CPU")
