"""C1's third clause and the causes ``watch`` states (Spec §3.12.2, §3.12.3).

* Silent on correct decoders of every layout of ``tests/_bug_decoders.py``,
  including rows that verify no draft in some rounds and a wasteful decoder
  that feeds, for verification, drafts whose rejection it could already know.
* Each planted bug caught at the first wrong call that this suite's own diff
  hook finds, in ``record`` mode (violations sorted by call) and in ``raise``
  mode, with its cause in the decoder's terms: stale attended slots, positions
  not advanced, crops of the wrong length or of the wrong rows, a bonus from
  the wrong model, masks derived from token values.
"""

from __future__ import annotations


import pytest

import _bug_decoders as decoders
from _broken_helpers import K, N, WITH_PAD_ID, pair, reference
from _catch import check_catch, every_other, recorded


@pytest.mark.slow_except('right_holes-qwen3', 'static-llama')
@pytest.mark.parametrize("family", ["qwen3", "llama", "gpt2"])
@pytest.mark.parametrize("layout", decoders.LAYOUTS)
def test_correct_decoders_of_every_layout_are_silent(family, layout):
    target, draft = pair(family)
    for kwargs in ({}, {"ks": every_other}, {"waste": True}):
        run = lambda: decoders.decode(target, draft, WITH_PAD_ID, K, N, layout, **kwargs)  # noqa: E731
        out, w = recorded(target, draft, run)
        assert out == reference(family, WITH_PAD_ID) and w.violations == [], (kwargs, w.report())
        if kwargs.get("waste"):  # it really fed the target drafts the target had already rejected
            memo = w.history.stream
            assert memo.late and all(memo.late[node] > memo.rejected[node] for node in memo.late)


ITEM_BUGS = ("stale", "positions", "crop_short", "crop_rows", "bonus_draft", "pad_from_ids")


@pytest.mark.slow_except('stale-right_holes', 'bonus_draft-repad')
@pytest.mark.parametrize("layout", decoders.LAYOUTS)
@pytest.mark.parametrize("bug", ITEM_BUGS)
def test_each_bug_is_caught_at_its_first_wrong_call_with_its_cause(bug, layout):
    out, _ = check_catch(bug, layout)
    assert out != reference("qwen3", WITH_PAD_ID) or bug == "pad_from_ids"  # the pad id comes late: no output changed yet
