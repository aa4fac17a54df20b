"""The API pages render as a reader expects.

No literal Sphinx roles, dataclass fields listed with their shapes, every
public module under its ``batchspec.*`` name, and ``METHODS`` listing what the
registry holds. The render-time helpers (docsbuild/) are checked on their own:
each conversion fires on the input it exists for and leaves other text alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import griffe
import griffe_batchspec as ext  # docsbuild/, on pytest's pythonpath
import hooks
import pytest

ROOT = Path(__file__).resolve().parents[2]

ROLE = re.compile(r":(class|func|meth|data|mod|attr|exc|obj):")
MODULES = ["batchspec", "reference", "invariants", "audit", "oracle", "faults", "scheduler", "models", "trace", "viz"]


def page(site, name: str) -> str:
    return (site / "api" / name / "index.html").read_text()


def test_no_literal_roles_on_any_api_page(docs_site):
    for name in MODULES:
        text = page(docs_site, name)
        assert not ROLE.search(text), (name, ROLE.search(text) and text[ROLE.search(text).start() - 80:][:200])
    # the roles became links: Scheduler's docstring links the module it cites
    assert 'href="../reference/#batchspec.reference.exspec_policy"' in page(docs_site, "scheduler")


def test_dataclass_fields_are_listed_with_shapes(docs_site):
    api = page(docs_site, "batchspec")
    for field in ("sequences", "stats", "stop_reasons", "violations"):
        assert f'id="batchspec.GenerationResult.{field}"' in api, field
    inv = page(docs_site, "invariants")
    for field in ("round", "step", "tokens", "mask", "pad", "length", "caches", "calls", "draft_tokens"):
        assert f'id="batchspec.invariants.Observation.{field}"' in inv, field
    tokens = inv[inv.index('id="batchspec.invariants.Observation.tokens"'):][:3000]
    assert "<code>[B, L]</code> left-padded committed grid" in tokens


def test_every_public_module_has_a_page_named_batchspec_dot(docs_site):
    for name in MODULES:
        dotted = "batchspec" if name == "batchspec" else f"batchspec.{name}"
        text = page(docs_site, name)
        assert f"<h1" in text and f'id="{dotted}"' in text, name
    ref = page(docs_site, "reference")
    assert re.search(r'id="batchspec.reference.acceptance" class="doc doc-heading">\s*<code>batchspec.reference.acceptance<', ref)
    assert 'id="reference.' not in ref and 'id="invariants.' not in page(docs_site, "invariants")


def test_methods_table_lists_the_registry(docs_site):
    from batchspec import METHODS

    api = page(docs_site, "batchspec")
    assert "batchspec:methods" not in api
    for name in METHODS:
        assert f'method="{name}"' in api.replace("&quot;", '"'), name
    assert {"eqspec", "autoregressive", "masking", "rollback", "dsd", "exspec"} <= set(METHODS)


@pytest.fixture(scope="module")
def loaded():
    """The batchspec package as the API pages load it: the extension's mount in place."""
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)], extensions=griffe.load_extensions(ext.BatchspecNamespace))
    return loader.load("batchspec")


def test_roles_resolve_from_the_docstrings_scope(loaded):
    eqspec = loaded["reference.eqspec"]
    assert ext.identifier(eqspec, "BatchState") == "batchspec.reference.state.BatchState"  # an import
    assert ext.identifier(loaded["reference"], ".moves") == "batchspec.reference.moves"  # relative module
    assert ext.identifier(eqspec, "reference.state.repad") == "batchspec.reference.state.repad"
    assert ext.identifier(eqspec, "zipfile") == "zipfile"  # unknown: left as written, rendered as code
    out = ext.convert(eqspec, "see :class:`~batchspec.reference.state.BatchState` s and ``x``")
    assert out == ('see <autoref identifier="batchspec.reference.state.BatchState" optional>'
                   "<code>BatchState</code></autoref>s and ``x``")
    assert ext.convert(eqspec, "no role: `BatchState`, a:b:`c`") == "no role: `BatchState`, a:b:`c`"


def test_mount_and_field_comments(loaded):
    assert loaded["reference.state.repad"].path == "batchspec.reference.state.repad"
    assert loaded["invariants.Observation"].path.startswith("batchspec.invariants")
    assert loaded["invariants.observation.Observation.pad"].docstring.value == "p_i"
    assert loaded["invariants.observation.Observation.tokens"].docstring.value.startswith("`[B, L]` left-padded")
    assert ext.trailing_comment('x: str = "# not a comment"  # real') == "real"
    assert ext.trailing_comment('x: str = "# not a comment"') is None


def test_module_headings_get_their_full_path_only():
    html = ('<h3 id="batchspec.reference.moves" class="doc doc-heading">\n <code>moves</code>'
            '<h4 id="batchspec.reference.moves.realign" class="doc doc-heading">\n <code>realign</code>')
    out = hooks.full_module_headings(html)
    assert "<code>batchspec.reference.moves</code>" in out and "<code>realign</code>" in out


def test_the_api_page_opens_with_the_four_entry_points(docs_site):
    """generate, Scheduler, watch and audit first, linked, then generate's own entry."""
    api = page(docs_site, "batchspec")
    first = re.search(r'<h[2-6] id="(batchspec[.\w]*)" class="doc doc-heading"', api).group(1)
    assert first == "batchspec.generate"
    opening = api[:api.index('id="batchspec.generate"')]
    links = re.findall(r'href="([^"]+)"[^>]*><code>(\w+)</code>', opening)
    assert [name for _, name in links if name != "GenerationResult"] == ["generate", "Scheduler", "watch", "audit"]
    assert ("../scheduler/#batchspec.scheduler.Scheduler", "Scheduler") in links
