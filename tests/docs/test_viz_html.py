"""The step-through page (batchspec.viz.html) is one self-contained file carrying its trace.

Recorded on a tiny float64 pair (no default-pair load): the page must hold the
trace as JSON that reads back to the same steps, load nothing from the
network, and keep a ``</script>`` inside the data from closing the element.
What the page draws is checked in a real browser by tests/docs/test_browser.py.
"""

from __future__ import annotations

import json
import re

import pytest

from batchspec.trace import Trace, record
from batchspec.viz.html import compact, comparison_html, write_html

DATA = re.compile(r'<script type="application/json" class="bsv-data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def trace(pairs):
    target, draft = pairs("llama")
    return record(target, draft, [[3, 4, 5], [6, 7, 8, 9, 10, 11]], "masking", num_draft_tokens=3, max_new_tokens=6)


def embedded(page: str) -> list[dict]:
    (data,) = DATA.findall(page)
    return json.loads(data)


def test_page_is_self_contained_and_carries_the_trace(trace, tmp_path):
    page = write_html(trace, tmp_path / "t.html").read_text()
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page)  # no CDN, nothing fetched
    assert "<script src" not in page and re.findall(r"<link[^>]*>", page) == ['<link rel="icon" href="data:,">']
    (shown,) = embedded(page)
    assert shown["label"] == "masking" and shown["header"] == trace.header
    assert [s["step"] for s in shown["steps"]] == [s["step"] for s in trace.steps]
    assert shown["steps"][-1]["violations"] == trace.steps[-1]["violations"]
    assert all("layer0_sum" not in c for s in shown["steps"] if s["observation"]
               for c in s["observation"]["caches"].values())
    assert ".bsv-viewer" in page and "function Viewer" in page  # styles and script inline


def test_a_saved_trace_path_works_and_script_tags_in_data_are_escaped(trace, tmp_path):
    trace.save(tmp_path / "t.jsonl")
    hostile = Trace(dict(trace.header, pair="</script><script>alert(1)</script>"), trace.steps, trace.result)
    page = comparison_html({"a": tmp_path / "t.jsonl", "b": hostile}, tmp_path / "two.html").read_text()
    assert page.count("</script>") == 2  # the data element and the viewer script: none from the data
    a, b = embedded(page)
    assert a["header"] == trace.header and b["header"]["pair"].startswith("</script>")
    assert compact(trace, "x")["steps"][0]["index"] == 0


def legend_colours(css: str) -> dict[str, str]:
    """The background each legend entry of the viewer shows, from its stylesheet."""
    from batchspec.viz.html import LEGEND

    rules = dict(re.findall(r"\.bsv-([\w-]+)(?:, \.bsv-[\w-]+)* \{ background: ([^;]+);", css))
    rules |= {name: colour for names, colour in re.findall(r"((?:\.bsv-[\w-]+, )+\.bsv-[\w-]+) \{ background: ([^;]+);", css)
              for name in re.findall(r"\.bsv-([\w-]+)", names)}
    return {cls: rules[cls].strip().lower() for cls, _ in LEGEND}


def test_no_two_legend_entries_share_a_colour():
    """The legend had two yellows (drafted, slot written) and two light blues (prompt, slot kept)."""
    from batchspec.viz.html import ASSETS

    colours = legend_colours((ASSETS / "viewer.css").read_text())
    assert len(set(colours.values())) == len(colours), colours
    planted = legend_colours((ASSETS / "viewer.css").read_text() + ".bsv-kept { background: #56B4E9; }\n")
    assert planted["kept"] == planted["prompt"] and len(set(planted.values())) < len(planted)  # would fail
