"""Every predicate fires on a state that violates it, naming the row and the
values, and stays silent on the valid states of a real ragged run (Spec §3)."""

from __future__ import annotations

import copy

import pytest
import torch

from batchspec.reference.draft_policy import Fixed
from batchspec.invariants import INVARIANTS, CacheView, InvariantViolation, Observation, check, violations
from batchspec.invariants.alignment import rectangular_alignment
from batchspec.invariants.cache import cache_correspondence
from batchspec.invariants.positions import position_continuity
from batchspec.invariants.sync import draft_target_sync
from batchspec.oracle import hf_oracle
from batchspec.reference import Models, decode, observation
from batchspec.testing import random_prompts


@pytest.fixture(scope="module")
def run(pairs):
    """Observations after every step of a ragged EQSPEC run (llama, mixed acceptance)."""
    target, draft = pairs("llama", "perturbed")
    prompts = random_prompts(seed=3, count=3, low=2, high=9)
    decoder = decode(Models(target, draft), prompts, [0, 1, 2], Fixed(3), 8, None)
    obs = [observation(event) for event in decoder if event.state.batch]
    return target, draft, obs


def first(obs_list, step, **where):
    for o in obs_list:
        if o.step == step and all(getattr(o, k) == v for k, v in where.items()):
            return o
    raise LookupError(step)


def ragged_boundary(obs_list):
    """A realign observation whose rows have different padding."""
    for o in obs_list:
        if o.step == "realign" and len(set(o.pad)) > 1 and min(o.pad) == 0 and max(o.pad) > 0:
            return o
    raise LookupError("no ragged boundary")


def mutable(o: Observation) -> Observation:
    """A deep copy whose tensors can be edited without touching the run."""
    return copy.deepcopy(o)


def test_registry_order_and_ids():
    assert [i for i, _ in INVARIANTS][:4] == ["I1", "I2", "I3", "I4"]


def test_silent_on_every_step_of_a_valid_run(run):
    target, draft, obs = run
    steps = {o.step for o in obs}
    assert steps == {"prefill", "draft", "verify", "realign"}
    assert any(len(set(o.pad)) > 1 for o in obs if o.step == "realign")  # ragged really happened
    oracle = hf_oracle({"target": target, "draft": draft})
    for o in obs:
        assert violations(o, oracle=oracle) == []


# ---- I1 -----------------------------------------------------------------------------------

def test_i1_fires_on_lengths_that_do_not_fill_the_grid(run):
    o = mutable(ragged_boundary(run[2]))
    o.pad[1] += 1
    found = rectangular_alignment(o)
    assert [(v.invariant, v.row) for v in found] == [("I1", 1)]
    assert found[0].actual == {"p_i": o.pad[1], "c_i": o.length[1]}


def test_i1_fires_on_a_hole_in_the_grid_mask(run):
    o = mutable(ragged_boundary(run[2]))
    row = 0
    o.mask[row, -2] = 0
    found = rectangular_alignment(o)
    assert [(v.invariant, v.row) for v in found] == [("I1", row)]
    assert found[0].expected == [0] * o.pad[row] + [1] * o.length[row]
    assert found[0].actual == o.mask[row].tolist()


def test_i1_fires_on_a_hole_in_a_passed_mask(run):
    o = mutable(first(run[2], "verify", round=2))
    call = o.calls[0]
    call.attention_mask[1, o.pad[1] + 1] = 0  # a masked-out content slot (BSP-style)
    found = rectangular_alignment(o)
    assert [(v.invariant, v.row, v.model) for v in found] == [("I1", 1, "target")]


# ---- I2 -----------------------------------------------------------------------------------

def test_i2_fires_on_a_position_counter_off_by_one(run):
    o = mutable(first(run[2], "verify", round=2))
    call = o.calls[0]
    call.position_ids[1] += 1  # counter advanced by one too many (transformers #30042 shape)
    found = position_continuity(o)
    assert found and {v.row for v in found} == {1}
    assert found[0].invariant == "I2" and found[0].actual == found[0].expected + 1


def test_i2_fires_when_mask_and_positions_agree_but_skip_the_stream(run):
    o = mutable(first(run[2], "draft", round=2))
    call = o.calls[0]
    p = o.pad[0]
    call.attention_mask[0, p] = 0  # one content slot dropped, positions recomputed from that mask
    call.position_ids[0] -= 1
    found = position_continuity(o)
    want = o.length[0] - 1 + call.cache_length - (o.width - 1)  # c_i - 1, less one if the draft cache lags
    assert [(v.row, v.expected, v.actual) for v in found] == [(0, want, want - 1)]


# ---- I3 -----------------------------------------------------------------------------------

def test_i3_fires_on_a_cache_one_slot_too_long(run):
    o = mutable(ragged_boundary(run[2]))
    k, v = o.caches["target"].layers[0]
    extra = [(torch.cat([k, k[:, :, -1:]], 2), torch.cat([v, v[:, :, -1:]], 2)) for k, v in o.caches["target"].layers]
    o.caches["target"] = CacheView(extra)
    found = cache_correspondence(o)
    assert [(x.invariant, x.model, x.expected, x.actual) for x in found] == [("I3", "target", o.width - 1, o.width)]


def test_i3_fires_on_nan_in_a_padding_slot(run):
    o = mutable(ragged_boundary(run[2]))
    row = max(range(len(o.pad)), key=lambda i: o.pad[i])
    o.caches["draft"].layers[1][1][row, :, 0, :] = float("nan")
    found = cache_correspondence(o)
    assert [(x.row, x.model) for x in found] == [(row, "draft")]
    assert "layer 1, slot 0" in found[0].actual


def test_i3_semantic_fires_on_a_stale_entry(run):
    target, draft, obs = run
    o = mutable(ragged_boundary(obs))
    row = 1
    slot = o.pad[row] + 1
    o.caches["draft"].layers[0][0][row, :, slot, :] += 1e-3  # one wrong key
    oracle = hf_oracle({"target": target, "draft": draft})
    assert cache_correspondence(o) == []  # structure alone cannot see it
    found = cache_correspondence(o, oracle=oracle)
    assert [(x.row, x.model) for x in found] == [(row, "draft")]
    assert f"slot {slot}" in found[0].actual


# ---- I4 -----------------------------------------------------------------------------------

def test_i4_fires_when_verify_checks_other_tokens_than_drafted(run):
    o = mutable(first(run[2], "verify", round=2))
    o.calls[0].input_ids[2, 1] = (int(o.calls[0].input_ids[2, 1]) + 1) % 96
    found = draft_target_sync(o)
    assert [(v.invariant, v.row, v.model) for v in found] == [("I4", 2, "target")]
    assert found[0].expected == o.draft_tokens[2].tolist()


def first_draft_call(obs_list, lag: int):
    """The first draft step whose call starts a round over a cache ``lag`` slots short of ``L - 1``."""
    starts = [o for o in obs_list if o.step == "draft" and o.draft_tokens.shape[1] == 1 and o.calls]
    return next(o for o in starts if o.calls[0].cache_length == o.width - 1 - lag)


def test_i4_fires_when_a_lagging_draft_call_does_not_feed_the_slot_it_lacks(run):
    o = mutable(first_draft_call(run[2], lag=1))  # the previous round deferred its catch-up (Spec §4.2.1)
    call = o.calls[0]
    assert draft_target_sync(o) == [] and call.input_ids.shape[1] == 2
    call.input_ids = call.input_ids.clone()
    call.input_ids[1, 0] = (int(call.input_ids[1, 0]) + 1) % 96  # not the token before the newest
    found = draft_target_sync(o)
    assert [(v.invariant, v.row, v.model) for v in found] == [("I4", 1, "draft")]


def test_i4_fires_when_a_round_does_not_start_at_the_newest_token(run):
    o = mutable(first(run[2], "verify", round=2))  # the target's cache is never short: its call starts at L - 1
    call = o.calls[0]
    assert call.cache_length == o.width - 1
    call.input_ids = call.input_ids.clone()  # it is a view of the grid's newest column
    call.input_ids[0, 0] = (int(call.input_ids[0, 0]) + 1) % 96
    found = draft_target_sync(o)
    assert [(v.row, v.expected, v.actual) for v in found] == [(0, int(o.tokens[0, -1]), int(call.input_ids[0, 0]))]


def test_i4_fires_when_the_caches_disagree_in_length(run):
    o = mutable(ragged_boundary(run[2]))
    short = o.width - 3  # two slots short: more than the deferred catch-up's one (Spec §4.2.1)
    o.caches["draft"] = CacheView([(k[:, :, :short], v[:, :, :short]) for k, v in o.caches["draft"].layers])
    found = draft_target_sync(o)
    assert len(found) == 1 and found[0].actual == {"target": o.width - 1, "draft": short}


def test_i3_and_i4_allow_the_draft_cache_one_slot_short_at_a_boundary(run):
    lagging = [o for o in run[2] if o.step == "realign" and o.caches["draft"].length == o.width - 2]
    assert lagging  # the run deferred a catch-up (Spec §4.2.1)
    assert draft_target_sync(lagging[0]) == [] and cache_correspondence(lagging[0]) == []


def test_check_raises_with_fields(run):
    o = mutable(ragged_boundary(run[2]))
    o.pad[0] += 1
    with pytest.raises(InvariantViolation) as info:
        check(o)
    err = info.value
    assert (err.invariant, err.round, err.step, err.row) == ("I1", o.round, "realign", 0)
    assert "I1 rectangular_alignment" in str(err) and "row 0" in str(err)


# ---- what the checker keeps between steps never hides a change ------------------------------

def test_i4_sees_a_grid_mask_changed_in_place_after_it_was_checked(run):
    o = mutable(first(run[2], "draft", round=2))
    assert draft_target_sync(o) == []  # the expected call mask is now kept for this grid mask
    o.mask[0, o.pad[0]] = 0  # the grid drops a committed slot the call still attends
    assert [(v.invariant, v.row) for v in draft_target_sync(o)] == [("I4", 0)]


def test_a_calls_content_index_follows_its_mask():
    from batchspec.invariants import ForwardCall

    mask = torch.tensor([[0, 1, 1, 1]])
    call = ForwardCall("target", torch.tensor([[5, 6]]), mask, torch.tensor([[1, 2]]), 2)
    assert call.content_positions()[1].tolist() == [[1, 2]]
    mask[0, 2] = 0  # in place: the first input is masked now
    assert call.content_positions()[1].tolist() == [[-1, 1]]
    call.attention_mask = torch.tensor([[1, 1, 1, 1]])  # replaced
    assert call.content_positions()[1].tolist() == [[2, 3]]


def test_the_observed_grid_follows_the_state():
    from types import SimpleNamespace

    from batchspec.invariants.memo import Memo
    from batchspec.reference.observe import grid

    memo = Memo()  # the checker's, one per decode
    state = SimpleNamespace(pad=torch.tensor([0, 2]), length=torch.tensor([4, 2]), width=4)
    mask, pad, length = grid(state, memo)
    kept = grid(state, memo)[0]
    assert kept.data_ptr() == mask.data_ptr() and (pad, length) == ([0, 2], [4, 2])  # not built again
    assert torch.equal(grid(state)[0], mask)  # and the same as one built afresh
    state.pad[1] = 1  # in place
    state.length[1] = 3
    mask, pad, length = grid(state, memo)
    assert mask.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]] and (pad, length) == ([0, 1], [4, 3])
    state.width = 5  # L alone changes
    assert grid(state, memo)[0].tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    state.pad = torch.tensor([1, 2])
    assert grid(state, memo)[0].tolist() == [[0, 1, 1, 1, 1], [0, 0, 1, 1, 1]]
    with torch.inference_mode():  # found by value: inference tensors alike
        state.pad, state.length = torch.tensor([0, 1]), torch.tensor([5, 4])
        assert grid(state, memo)[1] == [0, 1]
        state.pad[1] = 2
        assert grid(state, memo)[1] == [0, 2] and grid(state, memo)[0].tolist()[1] == [0, 0, 1, 1, 1]


def test_the_checker_keeps_no_module_state():
    """Memoisation is the checker's own object, never module state nor a tensor's
    private version counter (the files are read as text: no name may hold a memo)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in [*(root / "invariants").glob("*.py"), *(root / "reference").rglob("*.py")]:
        text = path.read_text()
        assert "._" "version" not in text and "lru_cache" not in text, path  # (split, so that no file holds the name)
        assert not re.search(r"^_[A-Z_]+: *(dict|list)", text, re.M), path


def test_i4_sees_a_grid_mask_written_through_numpy(run):
    o = mutable(first(run[2], "draft", round=2))
    assert draft_target_sync(o) == []
    o.mask.numpy()[0, o.pad[0]] = 0  # numpy writes do not move the tensor's version counter
    assert [(v.invariant, v.row) for v in draft_target_sync(o)] == [("I4", 0)]


def test_i4_compares_masks_of_other_dtypes_without_rounding(run):
    o = mutable(first(run[2], "draft", round=2))
    o.mask = o.mask.double()
    assert draft_target_sync(o) == []  # a float grid of zeros and ones, long call masks: the same
    o.mask[0, o.pad[0]] = 0.5  # a long call mask cannot hold 0.5: cast to long it would be 0 and pass
    assert [(v.invariant, v.row) for v in draft_target_sync(o)] == [("I4", 0)]
    o.mask = o.mask[:, :-2].round()  # narrower than the L - 1 committed slots the calls attend
    assert any(v.invariant == "I4" and v.row is None for v in draft_target_sync(o))


def test_checks_run_under_inference_mode(pairs):
    target, draft = pairs("llama", "perturbed")
    prompts = random_prompts(seed=3, count=3, low=2, high=9)
    import batchspec

    plain = batchspec.generate(target, draft, prompts, num_draft_tokens=3, max_new_tokens=6, check_invariants=True)
    with torch.inference_mode():
        inside = batchspec.generate(target, draft, prompts, num_draft_tokens=3, max_new_tokens=6,
                                    check_invariants=True)
    assert inside.sequences == plain.sequences and inside.stats.check_seconds > 0


def test_masks_of_any_dtype_are_read_alike(run):
    """Bool or float masks (what some decoders pass) check as the int64 ones do."""
    from batchspec.invariants import Ledger

    for dtype in (torch.bool, torch.float32):
        ledger = Ledger()
        for o in run[2]:
            o = mutable(o)
            o.mask = o.mask.to(dtype)
            for call in o.calls:
                call.attention_mask = call.attention_mask.to(dtype)
            assert violations(o, ledger=ledger) == [], (dtype, o.step, o.round)
