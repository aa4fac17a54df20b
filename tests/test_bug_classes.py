"""Bug classes reported in real batch speculative decoders, planted one at a time
in outside decoders of four layouts (``tests/_bug_decoders.py``: left-padded
and repadded, left- and right-padded with rejected drafts kept as holes, a
preallocated cache with a write offset per row): each caught at the first
wrong call this suite's own diff hook finds, with its cause (Spec §3.12.2).

* every row's cache offset advanced by the whole draft block, whatever was accepted;
* rejected keys and values zeroed but still attended;
* the bonus token duplicated into the next round's first draft and committed again;
* a row that verifies no draft this round committing the draft's token unverified;
* position ids from the batch's largest acceptance (wrong only at batch >= 2, k >= 2,
  when rows accept different counts).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: helpers by path
import _bug_decoders as decoders  # noqa: E402
from _broken_helpers import K, N, WITH_PAD_ID, pair, reference  # noqa: E402
from _catch import check_catch, recorded, runner  # noqa: E402

CLASSES = ("offset_block", "zeroed", "bonus_dup", "zero_drafts", "batch_max")


@pytest.mark.parametrize("layout", decoders.LAYOUTS)
@pytest.mark.parametrize("bug", CLASSES)
def test_each_class_is_caught_at_its_first_wrong_call_with_its_cause(bug, layout):
    out, _ = check_catch(bug, layout)
    if bug != "zeroed":  # zeroed keys blur attention without moving an argmax of these tiny models
        assert out != reference("qwen3", WITH_PAD_ID)


@pytest.mark.parametrize("layout", decoders.LAYOUTS)
def test_batch_max_needs_a_ragged_batch(layout):
    """One row, or rows that all accept alike, hide the bug: nothing to report, nothing wrong."""
    target, draft = pair("qwen3")
    out, w = recorded(target, draft, runner(target, draft, layout, "batch_max", WITH_PAD_ID[:1]), WITH_PAD_ID[:1])
    assert out == reference("qwen3", WITH_PAD_ID[:1]) and w.violations == [], w.report()

