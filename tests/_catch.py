"""The catch of one planted bug (``tests/_bug_decoders.py``): the decoder's first
wrong call found by this test suite's own diff hook (``first_divergence``: the
first call whose inputs, mask, positions, cache length or logits differ from a
correct run of the same decoder), and what ``watch`` reported (Spec §3.12)."""

from __future__ import annotations

import re

import _bug_decoders as decoders
from _broken_helpers import K, N, WITH_PAD_ID, pair, reference
from _call_diff import first_divergence

from batchspec.invariants import InvariantViolation, watch

#: bug -> (what its first violation must say, what it must not say): the cause in the decoder's terms
CAUSES = {
    "stale": (r"rejected draft left attended", r"position ids|pad id"),
    "offset_block": (r"rejected draft left attended \(the mask, a crop or a cache offset", r"dropped|pad id"),
    "zeroed": (r"holds zeros .*zeroed, such as a rejected draft.s, still attended", r"position ids|pad id"),
    "positions": (r"position ids lag", r"pad id|mask"),
    "crop_short": (r"crop(ped)? .*(wrong length|dropped)|(cropped or dropped).*crop", r"pad id|position ids"),
    "crop_rows": (r"crop", r"pad id|token values|position ids"),
    "bonus_draft": (r"committed", r"position ids|pad id|mask hides"),
    "pad_from_ids": (r"mask derived from token values .* pad id 0", r"position ids (lag|run)"),
    "bonus_dup": (r"repeated or made up", r"position ids|pad id"),
    "zero_drafts": (r"unverified token committed .*without drafts", r"position ids|pad id"),
    "batch_max": (r"position ids run ahead .*largest", r"pad id|mask hides"),
}


def every_other(round_: int, row: int) -> int:
    """Per-row draft lengths: a row verifies no draft every other round."""
    return 0 if (round_ + row) % 2 == 1 else K


def runner(target, draft, layout, bug=None, prompts=WITH_PAD_ID, ks=None):
    return lambda: decoders.decode(target, draft, prompts, K, N, layout, bug=bug, ks=ks)


def recorded(target, draft, run, prompts=WITH_PAD_ID):
    """``(outputs, watch)``: ``run()`` under ``watch`` in record mode, outputs checked."""
    with watch(target=target, draft=draft, check="record") as w:
        out = run()
        w.outputs(prompts, out, max_new_tokens=N)
    return out, w


def raised(target, draft, run, prompts=WITH_PAD_ID):
    """The violation ``watch`` raises (``check="raise"``) on ``run()``."""
    try:
        with watch(target=target, draft=draft) as w:
            w.outputs(prompts, run(), max_new_tokens=N)
    except InvariantViolation as caught:
        return caught
    raise AssertionError("watch raised nothing")


def check_catch(bug: str, layout: str, family: str = "qwen3"):
    """Assert that ``bug`` in ``layout`` is caught at its first wrong call with its cause."""
    target, draft = pair(family)
    ks = every_other if bug == "zero_drafts" else None  # the correct run with the same per-row draft lengths
    correct, faulty = runner(target, draft, layout, ks=ks), runner(target, draft, layout, bug, ks=ks)
    first = first_divergence(target, draft, correct, faulty)
    out, w = recorded(target, draft, faulty)
    v = w.violations[0]
    calls = [u.call for u in w.violations if u.call is not None]
    assert calls == sorted(calls), w.report()  # record mode: the earliest wrong call first
    assert v.call == first, f"{bug}/{layout}: first wrong call #{first}, flagged {v}"
    assert v.invariant == "C1" and v.step == "call", str(v)  # at a forward call, not only by w.outputs
    must, must_not = CAUSES[bug]
    assert re.search(must, v.detail) and not re.search(must_not, v.detail), f"{bug}/{layout}: {v.detail}"
    assert all(u.call is None or u.call >= first for u in w.violations if u.invariant == "C2"), w.report()
    assert raised(target, draft, faulty).call == first
    return out, v
