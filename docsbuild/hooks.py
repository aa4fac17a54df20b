"""MkDocs hooks: pages that are generated from the installed package when the site builds.

* ``assets/home-methods.svg``: the home page's picture of one ragged round and
  what each method does to it (docsbuild/home_picture.py).
* spec pages: their ``../docs/...`` links (right from ``spec/`` in the
  repository) turned into links to the site's pages (the site serves the
  spec under ``docs/spec``).
* ``api/batchspec.md``: the ``<!-- batchspec:methods -->`` marker becomes a
  table of what ``batchspec.METHODS`` holds, so methods registered by any
  module appear without anyone editing the page.
* ``step-through.md``: the ``<!-- batchspec:step-through -->`` marker becomes
  the step-through viewer (``batchspec.viz.html``) of EQSPEC and masking on
  the same four prompts, recorded from the embedded default pair when the site
  builds (1-2 s on one idle CPU thread, after loading torch), so the page
  always shows what the code does now. The two traces are also written next to the page as JSON lines.
* notebook pages: the table of contents links each heading and reads as it
  does, code spans included.
* API pages: a module's heading shows its full import path
  (``batchspec.reference.acceptance``, not ``acceptance``).
"""

from __future__ import annotations

import importlib.util
import re
import tempfile
from html import unescape
from pathlib import Path

import home_picture  # docsbuild/: on sys.path while mkdocs loads this hook, and in tests/docs/test_docs_api.py

ROOT = Path(__file__).resolve().parent.parent
METHODS_MARKER = "<!-- batchspec:methods -->"
VIEWER_MARKER = "<!-- batchspec:step-through -->"
# Held-out stdlib windows and prompt lengths: four rows of different lengths whose
# first round already accepts different counts, so masking breaks I1 in round 1.
STEP_THROUGH_PROMPTS = ((3, 9), (8, 15), (13, 11), (21, 18))
STEP_THROUGH_SETTINGS = {"num_draft_tokens": 4, "max_new_tokens": 12, "batch_size": 4}
_traces: dict = {}  # recorded once per build: on_files and the page both read them
# mkdocstrings' heading of an object: its id, then its short name as code.
HEADING = re.compile(r'(<h[2-6] id="(batchspec(?:\.\w+)+)" class="doc doc-heading">\s*<code>)(\w+)(</code>)')


def methods_table() -> str:
    """A Markdown table of the method registry (name, needs a draft, the call)."""
    from batchspec import METHODS

    rows = ["| method | needs a draft | call |", "| --- | --- | --- |"]
    for name, method in METHODS.items():
        draft = "yes" if method.needs_draft else "no (target only)"
        rows.append(f'| `{name}` | {draft} | `generate(target, draft, prompts, method="{name}")` |')
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri.startswith("spec/"):
        markdown = markdown.replace("](../docs/", "](../")
    if METHODS_MARKER in markdown:
        markdown = markdown.replace(METHODS_MARKER, methods_table())
    return markdown


def step_through_traces() -> dict:
    """``{"EQSPEC": trace, "masking": trace}`` on the default pair, float64, CPU."""
    if not _traces:
        import torch

        from batchspec.models.default_pair import held_out_sample, load_default_pair
        from batchspec.trace import record
        from transformers.utils import logging

        logging.disable_progress_bar()  # weight-loading bars would clutter the build log

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny models: one thread is fastest and leaves the other cores alone
        try:
            target, draft = load_default_pair(torch.float64)
            windows = held_out_sample()  # [64, 256] bytes
            prompts = [windows[w][:n].tolist() for w, n in STEP_THROUGH_PROMPTS]
            for label, method in (("EQSPEC", "eqspec"), ("masking", "masking")):
                _traces[label] = record(target, draft, prompts, method, pair="default", alphabet="bytes",
                                        **STEP_THROUGH_SETTINGS)
        finally:
            torch.set_num_threads(threads)
    return _traces


def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except (ImportError, ValueError):
        return False


def full_module_headings(html: str) -> str:
    """Show a module heading's full path; class and function headings keep their short name."""

    def heading(match: re.Match) -> str:
        path, short = match.group(2), match.group(3)
        if path.rsplit(".", 1)[-1] == short and _is_module(path):
            return f"{match.group(1)}{path}{match.group(4)}"
        return match.group(0)

    return HEADING.sub(heading, html)


NOTEBOOK_HEADING = re.compile(r'<h([1-6]) id="([^"]+)"[^>]*>(.*?)</h[1-6]>', re.S)


def notebook_toc(html: str, toc) -> None:
    """Point a notebook page's table of contents at its headings, titled as they read.

    mkdocs-jupyter builds a notebook's table of contents from its Markdown with
    the code spans cut out: "Online: the `Scheduler`" was listed as "Online: the",
    linked to ``#online-the``, an anchor the page does not have. The entries are
    the headings in page order, so they are matched in that order.
    """
    headings = []
    for level, anchor, inner in NOTEBOOK_HEADING.findall(html):
        inner = re.sub(r'<a class="anchor-link".*?</a>', "", inner, flags=re.S)
        headings.append((int(level), anchor, unescape(re.sub(r"<[^>]+>", "", inner)).strip()))

    def in_order(items):
        for item in items:
            yield item
            yield from in_order(item.children)

    entries = list(in_order(toc))
    if [e.level for e in entries] != [level for level, _, _ in headings]:
        return  # not the page's headings one for one: leave the entries as they are
    for entry, (_, anchor, text) in zip(entries, headings):
        entry.id, entry.title = anchor, text


def on_page_content(html: str, page, **kwargs) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        notebook_toc(html, page.toc)
    if page.file.src_uri.startswith("api/"):
        html = full_module_headings(html)
    if VIEWER_MARKER in html:
        from batchspec.viz.html import fragment

        html = html.replace(VIEWER_MARKER, fragment(step_through_traces()))
    return html


def on_files(files, config, **kwargs):
    """Record the viewer page's traces and publish them next to it, for ``Trace.load``;
    publish the home page's picture."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "assets/home-methods.svg", content=home_picture.svg()))

    folder = Path(tempfile.mkdtemp(prefix="batchspec-step-through-"))
    for label, trace in step_through_traces().items():
        name = f"{label.lower()}.jsonl"
        trace.save(folder / name)
        files.append(File.generated(config, f"step-through/{name}", abs_src_path=str(folder / name)))
    return files
