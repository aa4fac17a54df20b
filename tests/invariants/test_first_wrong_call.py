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


@pytest.mark.parametrize("bug", [None, "stale", "bonus_dup", "zero_drafts"])
def test_the_memo_is_the_same_with_and_without_its_prefill_shortcut(bug, monkeypatch):
    """``Stream.remember`` skips its per-input walk when that walk could ground and reject
    nothing (``Stream._only_odd``: a prefill, most often); with the shortcut off, every
    field of the memo and every violation come out the same, on a correct decoder and on
    bugs the memo decides (stale drafts, a duplicated bonus, an unverified commit)."""
    from batchspec.invariants.stream import Stream

    target, draft = pair("qwen3")
    ks = every_other if bug == "zero_drafts" else None
    run = lambda: decoders.decode(target, draft, WITH_PAD_ID, K, N, "repad", bug=bug, ks=ks)  # noqa: E731
    fields = ("grounded", "rejected", "order", "fed", "late", "odd", "seen", "proposed", "tested", "prefix", "rank")
    seen = []
    for shortcut in (True, False):
        if not shortcut:
            monkeypatch.setattr(Stream, "_only_odd", lambda *a: False)
        out, w = recorded(target, draft, run)
        memo = w.history.stream
        seen.append((out, [str(v) for v in w.violations], {f: getattr(memo, f) for f in fields}))
    assert seen[0] == seen[1]
    assert seen[0][2]["odd"]  # the shortcut noted what the walk notes
