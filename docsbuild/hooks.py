"""MkDocs hooks: pages that are generated from the installed package when the site builds.

* ``api/batchspec.md``: the ``<!-- batchspec:methods -->`` marker becomes a
  table of what ``batchspec.METHODS`` holds, so methods registered by any
  module appear without anyone editing the page.
* API pages: a module's heading shows its full import path
  (``batchspec.reference.acceptance``, not ``acceptance``).
"""

from __future__ import annotations

import importlib.util
import re

METHODS_MARKER = "<!-- batchspec:methods -->"
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
    if METHODS_MARKER in markdown:
        markdown = markdown.replace(METHODS_MARKER, methods_table())
    return markdown


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


def on_page_content(html: str, page, **kwargs) -> str:
    if page.file.src_uri.startswith("api/"):
        html = full_module_headings(html)
    return html
