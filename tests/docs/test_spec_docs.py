"""The documentation site builds with ``mkdocs build --strict`` and its math renders offline.

``--strict`` turns every warning into a failure: a broken link or anchor, a
page missing from the nav, a docstring reference mkdocstrings cannot
resolve, a missing snippet (the home page includes ``README.md``). The
built spec pages must carry their math for the vendored KaTeX, load nothing
from the network, and every formula must parse with that KaTeX (checked with
node when it is installed).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KATEX = ROOT / "docs" / "assets" / "katex" / "katex.min.js"
MATH = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)


@pytest.fixture(scope="module")
def site(docs_site):
    return docs_site  # one build per test run, shared with the browser test (conftest.py)


def test_every_spec_page_is_built_with_its_math(site):
    pages = sorted((site / "spec").glob("*/index.html"))
    assert [p.parent.name for p in pages] == [p.stem for p in sorted((ROOT / "spec").glob("0*.md"))]
    for page in pages:
        text = page.read_text()
        assert "assets/katex/katex.min.js" in text and "assets/katex-init.js" in text
        assert not re.search(r'(src|href)="https?://(?!squidfunk)', text), page  # nothing fetched at view time
    assert len(MATH.findall((site / "spec" / "05-theorems" / "index.html").read_text())) > 20
    for asset in ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js", "fonts/KaTeX_Main-Regular.woff2"):
        assert (site / "assets" / "katex" / asset).is_file(), asset


def test_api_reference_and_tutorial_landing_page(site):
    api = (site / "api" / "reference" / "index.html").read_text()
    assert 'id="batchspec.reference.state.repad"' in api and "Unpad" in api
    assert 'id="batchspec.invariants.alignment.rectangular_alignment"' in (site / "api" / "invariants" / "index.html").read_text()
    assert "generate" in (site / "api" / "batchspec" / "index.html").read_text()
    assert "The ragged problem" in (site / "tutorials" / "index.html").read_text()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_every_formula_parses_with_the_vendored_katex(site):
    formulas = []
    for page in site.rglob("*.html"):
        for _, body in MATH.findall(page.read_text()):
            tex = html.unescape(body).strip()
            formulas.append([str(page.relative_to(site)), tex[2:-2], tex.startswith("\\[")])
    script = """const katex = require(process.argv[1]); const items = JSON.parse(require('fs').readFileSync(0, 'utf8'));
    const bad = [];
    for (const [where, tex, display] of items) {
      try { katex.renderToString(tex, {throwOnError: true, displayMode: display}); }
      catch (e) { bad.push(where + ': ' + tex + ': ' + String(e).slice(0, 160)); } }
    console.log(JSON.stringify(bad));"""
    run = subprocess.run(["node", "-e", script, str(KATEX)], input=json.dumps(formulas),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [] and len(formulas) > 100
