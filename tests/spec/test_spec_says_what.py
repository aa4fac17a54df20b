"""The spec says what; the design notes (``docs/design.md``) say how.

Storage layouts, timings and measured rationale live on the design page,
written once, and the spec links there. A timing in a spec page (a number
followed by ``ms``, ``µs``, ``s`` for seconds, or ``tok/s``) is an
engineering note inside the normative text, and fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: a number (with thousands separators or decimals), then a unit of time or of throughput
TIMING = re.compile(r"\d(?:[\d,.]*\d)?\s?(?:ms|µs|s|tok/s)(?![\w/])")


def timings(text: str) -> list[str]:
    """Every timing in ``text``."""
    return [m.group() for m in TIMING.finditer(text)]


def test_the_pattern_finds_timings_and_nothing_else():
    sample = "copies (6.5 ms against 4.4 ms per round), 21 s CPU; 1,544 s wall, 12 µs, 350 tok/s and 3s"
    assert timings(sample) == ["6.5 ms", "4.4 ms", "21 s", "1,544 s", "12 µs", "350 tok/s", "3s"]
    plain = "B = 32, 12 layers, 2 rounds, 58,660 states, §8.3 says, $L - 1$ slots, k 1–3, 4 steps, 9 ms_x"
    assert timings(plain) == []


def test_no_spec_page_holds_a_timing():
    found = [f"{page.name}:{n}: {hit!r}" for page in sorted((ROOT / "spec").glob("*.md"))
             for n, line in enumerate(page.read_text().splitlines(), 1) for hit in timings(line)]
    assert not found, "timings belong in docs/design.md, linked from the spec:\n" + "\n".join(found)


def test_the_design_page_is_in_the_site_nav():
    assert "design.md" in (ROOT / "mkdocs.yml").read_text()
