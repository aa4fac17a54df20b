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


import pytest

import _bug_decoders as decoders
from _broken_helpers import K, N, WITH_PAD_ID, pair, reference
from _catch import check_catch, every_other, recorded, runner

CLASSES = ("offset_block", "zeroed", "bonus_dup", "zero_drafts", "batch_max")


@pytest.mark.slow_except('offset_block-right_holes', 'zero_drafts-static')
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



#: conformance class (batchspec.conformance.classes) -> the planted bug it probes
VECTOR_CLASSES = {"offset_whole_block": "offset_block", "bonus_duplicated": "bonus_dup",
                  "positions_batch_max": "batch_max"}


def outside(bug=None, layout="repad", ks=None):
    """A conformance decoder (``batchspec.conformance.run``) of the outside decoder, greedy, no EOS;
    ``ks(round, row)``: per-row draft lengths."""
    def decode(target, draft, prompts, k, max_new_tokens, eos_token_id):
        assert not eos_token_id  # these vectors set no EOS
        return decoders.decode(target, draft, prompts, k, max_new_tokens, layout, bug=bug, ks=ks)
    return decode


@pytest.mark.slow
def test_the_class_vectors_pass_the_correct_decoder_and_fail_each_planted_bug(tmp_path):
    """Each vector sets the trap of its class (rows accepting different counts in one
    of EQSPEC's rounds); the three traps are the same, so each of these bugs fails
    all three. The traps are set for decoders whose rounds are EQSPEC's: the
    right-padded decoder commits its first token at the prefill, its rounds fall
    elsewhere, and there its whole-block offset happens to change no output."""
    from batchspec.conformance import check, export

    names = export(tmp_path, families=(), classes=tuple(VECTOR_CLASSES))
    for layout in ("repad", "static"):
        assert check(tmp_path, outside(layout=layout)) == {name: None for name in names}
        for bug in VECTOR_CLASSES.values():
            results = check(tmp_path, outside(bug, layout))
            assert all(results.values()), (bug, layout, results)


@pytest.mark.slow
def test_the_zero_draft_rows_vector_fails_a_decoder_that_commits_a_zero_draft_rows_draft_token(tmp_path):
    """A decoder whose rows verify no draft every other round (a per-row draft
    length) passes the vector when correct and fails it when such a row
    commits the draft's token unverified; a decoder that never leaves a row
    without drafts cannot show the bug, and passes (the bug is latent there)."""
    from batchspec.conformance import check, export

    names = export(tmp_path, families=(), classes=("zero_draft_rows",))
    for layout in ("repad", "static"):
        assert check(tmp_path, outside(layout=layout, ks=every_other)) == {name: None for name in names}
        failed = check(tmp_path, outside("zero_drafts", layout, ks=every_other))
        assert all(r and "(class zero_draft_rows: " in r for r in failed.values()), failed
        assert check(tmp_path, outside("zero_drafts", layout)) == {name: None for name in names}


@pytest.mark.slow
def test_the_rejected_attended_vector_fails_rejected_keys_left_stale_or_zeroed(tmp_path):
    """The vector's unrelated draft has most drafts rejected: a decoder that keeps
    their keys attended, stale or zeroed, fails it in every layout, though zeroed
    keys change no output on the catch tests' prompts; the correct decoder passes."""
    from batchspec.conformance import check, export

    names = export(tmp_path, families=(), classes=("rejected_attended",))
    for layout in decoders.LAYOUTS:
        assert check(tmp_path, outside(layout=layout)) == {name: None for name in names}
        for bug in ("stale", "zeroed"):
            failed = check(tmp_path, outside(bug, layout))
            assert all(r and "(class rejected_attended: " in r for r in failed.values()), (bug, layout, failed)
