"""The known-bug catalogue: which invariant catches each fault, and at which round.

Scenario: the float64 tiny qwen3 pair, four prompts of unequal length, k = 3,
10 new tokens. Round 1 is uniform (every row commits 4), round 2 the first
ragged one; one prompt's greedy output emits the pad id 0 in round 1.

Every fault is run three times: structural checks (``check_invariants=
"structural"``, I1–I5 on each observation alone), the default checks
(``True``: I1–I8, cache contents by provenance fingerprints, Spec §3.6) and
semantic checks (``"semantic"``, which also recomputes every cached key/value
with a fresh forward). The literal table ``CAUGHT`` is the catch-rate report
(Spec §7.7); each default and semantic round is also derived from a correct
EQSPEC run by the fault's own trigger rule (the round where the fault first
changes anything), so a predicate that fired late, or early, would fail here.
"""

from __future__ import annotations


import pytest
import torch

from _broken_helpers import K, N, WITH_PAD_ID, correct_run, one_thread, pair, reference, rounds  # noqa: F401

import batchspec
from batchspec import faults
from batchspec.invariants import ForwardCall, Observation, violations
from batchspec.invariants.verification import greedy_verification

#: fault -> first violation (invariant, round, step) with structural checks (or None),
#: with the default checks, with semantic checks
CAUGHT = {
    "position_counter": (("I2", 2, "draft"), ("I2", 2, "draft"), ("I2", 2, "draft")),
    "shared_offset": (("I3", 3, "realign"), ("I6", 2, "realign"), ("I3", 2, "realign")),
    "draft_unaligned": (None, ("I6", 2, "realign"), ("I3", 2, "realign")),
    "bonus_from_draft": (("I5", 2, "verify"), ("I5", 2, "verify"), ("I5", 2, "verify")),
    "keep_rejected_slot": (None, ("I6", 2, "realign"), ("I3", 2, "realign")),
    "permuted_rows": (None, ("I6", 2, "realign"), ("I3", 2, "realign")),
    "pad_from_token_id": (None, ("I6", 1, "realign"), ("I3", 1, "realign")),
}
MODES = ("structural", True, "semantic")


def trigger(fault: str, rec, width: int, staying: set, tokens: dict, drift: dict) -> bool:
    """Does round ``rec`` of a correct run (``width`` = L before it) give ``fault`` an effect?"""
    a = dict(zip(rec.requests, rec.appended))
    m = dict(zip(rec.requests, rec.accepted))
    delta = {r: rec.width - width - a[r] for r in staying}  # δ_i = L' - L - a_i
    moved = any(delta.values()) or len(staying) < len(rec.requests)
    return {
        "position_counter": any(drift.get(r, 0) for r in rec.requests),  # counter behind c_i
        "shared_offset": bool(staying) and (any(delta.values()) or rec.width != width + rec.drafted + 1),
        "draft_unaligned": any(delta.values()),
        "bonus_from_draft": any(m[r] < rec.drafted for r in rec.requests),
        "keep_rejected_slot": any(m[r] < rec.drafted for r in staying),
        "permuted_rows": moved and len(staying) >= 2,
        "pad_from_token_id": any(0 in t for r, t in tokens.items() if r in staying),
    }[fault]


def predicted_round(fault: str) -> int:
    drift: dict = {}
    for rec, width, staying, tokens in rounds(correct_run("qwen3", WITH_PAD_ID), WITH_PAD_ID):
        if trigger(fault, rec, width, staying, tokens, drift):
            return rec.round
        for r, a in zip(rec.requests, rec.appended):
            drift[r] = drift.get(r, 0) + a - 1
    raise AssertionError(f"{fault} never triggers in the scenario")


def run(fault, check, prompts=WITH_PAD_ID):
    target, draft = pair("qwen3")
    return faults.run(fault, target, draft, prompts, num_draft_tokens=K, max_new_tokens=N,
                      check_invariants=check)


def test_the_catalogue_is_complete():
    assert set(faults.CATALOGUE) == set(CAUGHT)
    assert "fault:bonus_from_draft" not in batchspec.METHODS  # run() registers only while it runs


def test_the_scenario_is_what_the_table_assumes():
    correct = correct_run("qwen3", WITH_PAD_ID)
    assert [r.appended for r in correct.stats.per_round[:2]] == [[4, 4, 4, 4], [4, 2, 2, 4]]
    assert reference("qwen3", WITH_PAD_ID)[3][2] == 0  # the pad id, emitted in round 1
    assert correct.sequences == reference("qwen3", WITH_PAD_ID)


def first(fault, mode):
    """``(violation, result)``: the first violation in ``mode`` (None if the run ends clean)."""
    try:
        return None, run(fault, mode)
    except batchspec.InvariantViolation as caught:
        return caught, None


def test_structural_checks():
    for fault, (expected, _, _) in CAUGHT.items():
        v, result = first(fault, "structural")
        assert (None if v is None else (v.invariant, v.round, v.step)) == expected, fault
        if v is None:
            assert result.violations == [], fault


@pytest.mark.slow_except('shared_offset-default', 'bonus_from_draft-semantic')
@pytest.mark.parametrize("mode", [True, "semantic"], ids=["default", "semantic"])
@pytest.mark.parametrize("fault", sorted(CAUGHT))
def test_default_and_semantic_checks_catch_every_fault_where_it_first_acts(fault, mode):
    v, _ = first(fault, mode)
    assert v is not None, f"{fault} not caught"
    assert (v.invariant, v.round, v.step) == CAUGHT[fault][MODES.index(mode)]
    assert v.round == predicted_round(fault)
    assert v.model == ("draft" if fault in ("draft_unaligned", "position_counter") else "target")


def test_catch_rate():
    caught = [sum(row[m] is not None for row in CAUGHT.values()) for m in range(3)]
    assert (*caught, len(CAUGHT)) == (3, 7, 7, 7)


def test_faults_the_structural_checks_miss_still_change_the_output():
    """Why the semantic mode exists: these faults keep every shape and every mask right."""
    expected = reference("qwen3", WITH_PAD_ID)
    for fault in ("keep_rejected_slot", "permuted_rows", "pad_from_token_id"):
        assert run(fault, False).sequences != expected, fault
    # the draft cache only feeds proposals, which the target verifies: output exact
    assert run("draft_unaligned", False).sequences == expected


@pytest.mark.parametrize("fault", ["permuted_rows", "draft_unaligned"])
def test_realignment_faults_are_inert_at_batch_1(fault):
    """Negative control: at B = 1 every δ_i = 0 (Spec §5.3), so nothing is realigned
    and these faults have nothing to corrupt: no violation, exact output."""
    prompt = [WITH_PAD_ID[2]]
    for mode in (True, "semantic"):
        result = run(fault, mode, prompt)
        assert result.violations == [] and result.sequences == reference("qwen3", prompt)


# --- I5 on hand-made observations ----------------------------------------------------------

def observation(committed, logits=True):
    """Row 0 fed [newest 5, drafts 7, 9]; the target's argmax is 7, then 9, then 4."""
    table = torch.full((1, 3, 10), -1.0, dtype=torch.float64)
    for j, token in enumerate((7, 9, 4)):
        table[0, j, token] = 1.0
    call = ForwardCall("target", torch.tensor([[5, 7, 9]]), torch.ones(1, 5, dtype=torch.long),
                       torch.tensor([[2, 3, 4]]), 2, table if logits else None)
    return Observation(1, "verify", torch.tensor([[1, 3, 5]]), torch.ones(1, 3, dtype=torch.long), [0], [3],
                       {}, [call], [0], torch.tensor([[7, 9]]), committed)


def test_I5_accepts_the_target_choices():
    assert greedy_verification(observation([[7, 9, 4]])) == []  # both drafts + bonus
    assert greedy_verification(observation([[7]])) == []  # a prefix (rollback)
    assert greedy_verification(observation(None)) == []  # nothing committed at this step


def test_I5_fires_on_a_token_the_target_did_not_choose():
    (v,) = greedy_verification(observation([[7, 2]]))
    assert (v.invariant, v.row, v.expected, v.actual) == ("I5", 0, 9, 2)


def test_I5_fires_on_a_choice_made_after_a_rejected_draft():
    obs = observation([[7, 9, 4]])
    obs.calls[0].input_ids = torch.tensor([[5, 8, 9]])  # the draft proposed 8, not 7
    (v,) = greedy_verification(obs)
    assert (v.expected, v.actual) == (7, 8) and "chosen after input 1" in v.detail


def test_I5_fires_when_nothing_records_the_verification():
    (v,) = greedy_verification(observation([[7]], logits=False))
    assert "without a recorded verification call" in v.detail
    assert [x.invariant for x in violations(observation([[7, 2]]))] == ["I5"]  # registered, after I4
