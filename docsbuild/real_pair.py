"""Run tutorials on a real pair once, and keep the executed notebooks as pages.

The docs build cannot run the Qwen2.5-Coder pair (9.6 GB, minutes per
tutorial), so the pages "On a real pair" are notebooks executed here, by
hand, and committed under ``docs/real-pair/``: outputs, pictures, and a first
cell saying when, where and how they were made. mkdocs-jupyter renders them
without executing them again.

Each notebook records :func:`code_hash`, a hash of its tutorial's code cells.
``tests/docs/test_real_pair_pages.py`` fails when the tutorial's code changes and
the page was not made again (:func:`stale`): the outputs on the page must be
what the code on the page prints. Markdown may change freely.

Run it from the repository root, once the pair is fetched::

    python docsbuild/real_pair.py                 # every page, the pair in float32
    python docsbuild/real_pair.py 07              # one page

float32 and one precision in memory at a time: the two models then hold
about 8 GB, and a 24 GiB machine keeps room for the lower precisions of
tutorial 7, loaded one after the other.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "real-pair"
PAIR, DTYPE, DEVICE = "qwen2.5-coder", "float32", "cpu"
#: the tutorials shown on a real pair: the masking chapter and the real-pair chapter
TUTORIALS = ("02_masking_breaks_i1_and_i2", "07_real_pairs_and_gpus")
TIMEOUT = 3600  # seconds per cell: a cell that decodes eight prompts at four batch sizes takes minutes


def code_cells(source: Path) -> list[str]:
    """The tutorial's code cells, in order, as a notebook shows them."""
    import jupytext

    return [cell.source.strip() for cell in jupytext.read(source).cells if cell.cell_type == "code"]


def code_hash(source: Path) -> str:
    """Hash of the tutorial's code cells (what the outputs depend on)."""
    return hashlib.sha256("\0".join(code_cells(source)).encode()).hexdigest()


def stale(page: Path, tutorials: Path = ROOT / "tutorials") -> str | None:
    """Why the committed ``page`` no longer shows its tutorial's code (None: it does):
    the tutorial's code cells changed since it ran, or the page's own code cells
    were edited by hand."""
    import nbformat

    notebook = nbformat.read(page, as_version=4)
    recorded = notebook.metadata.get("batchspec_real_pair", {})
    shown = [cell.source.strip() for cell in notebook.cells if cell.cell_type == "code"]
    source = tutorials / f"{page.stem}.py"
    if not source.is_file():
        return f"{page.name}: its tutorial {source.name} is gone"
    if recorded.get("code_hash") != code_hash(source):
        return (f"{page.name}: the code cells of tutorials/{source.name} changed since the page was "
                f"executed; run `python docsbuild/real_pair.py {page.stem[:2]}` with the pair fetched")
    if shown != code_cells(source):
        return f"{page.name}: its code cells are not the code of tutorials/{source.name}"
    return None


def machine() -> str:
    """The machine in words: cores, memory, accelerator, library versions."""
    import torch
    import transformers

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (f"{os.cpu_count()}-core {platform.machine()} CPU, {memory:.0f} GiB, {gpu}; "
            f"torch {torch.__version__}, transformers {transformers.__version__}")


def provenance(seconds: float, command: str) -> str:
    """The first cell of a page: when, where, how, and that it is not re-run."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB
    return (
        "> **Executed once on a real pair, then committed.** "  # a blockquote: notebook Markdown has no admonitions
        f"This page is the tutorial run on the **{PAIR}** pair (1.5B target, 0.5B draft) in "
        f"**{DTYPE}** on the **{DEVICE}**, on {datetime.date.today().isoformat()}, on a {machine()}. "
        f"It took {seconds / 60:.1f} minutes and at most {peak:.1f} GiB of memory.\n"
        f">\n> Made with `{command}`, after `batchspec models fetch {PAIR}`. The docs build shows "
        "it as it was recorded and does not run it; a test fails when the tutorial's code "
        "changes and the page is not made again.")


def publish(stem: str, command: str) -> float:
    """Execute ``tutorials/<stem>.py`` on the real pair into ``docs/real-pair/<stem>.ipynb``."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tutorials"))
    import harness

    os.environ.update(BATCHSPEC_TUTORIAL_PAIR=PAIR, BATCHSPEC_TUTORIAL_DTYPE=DTYPE,
                      BATCHSPEC_TUTORIAL_DEVICE=DEVICE, OMP_NUM_THREADS=str(os.cpu_count()))
    source, page = ROOT / "tutorials" / f"{stem}.py", OUT / f"{stem}.ipynb"
    seconds = harness.execute(source, page, timeout=TIMEOUT)
    notebook = nbformat.read(page, as_version=4)
    notebook.metadata.pop("batchspec", None)  # the harness's cache key: not this page's business
    notebook.metadata["batchspec_real_pair"] = {
        "code_hash": code_hash(source), "pair": PAIR, "dtype": DTYPE, "device": DEVICE,
        "date": datetime.date.today().isoformat(), "machine": machine(), "command": command,
        "seconds": round(seconds, 1)}
    notebook.cells.insert(1, nbformat.v4.new_markdown_cell(provenance(seconds, command)))
    nbformat.write(notebook, page)
    return seconds


def main(argv: list[str]) -> int:
    from batchspec.models import registry

    available, reason = registry.availability(PAIR)
    if not available:
        print(f"pair {PAIR!r} is {reason}: fetch it first (batchspec models fetch {PAIR})", file=sys.stderr)
        return 2
    chosen = [t for t in TUTORIALS if not argv or any(t.startswith(a) for a in argv)]
    if not chosen:
        print(f"no tutorial of {', '.join(TUTORIALS)} matches {' '.join(argv)}", file=sys.stderr)
        return 2
    if len(chosen) > 1:  # one process a page, so that each page's peak memory is its own
        import subprocess

        return max(subprocess.call([sys.executable, __file__, stem[:2]]) for stem in chosen)
    stem = chosen[0]
    seconds = publish(stem, "python docsbuild/real_pair.py " + stem[:2])
    print(f"{stem}: {seconds / 60:.1f} min -> docs/real-pair/{stem}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
