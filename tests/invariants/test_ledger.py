"""I6 cache provenance and I7 committed stream (Spec §3.6, §3.7) fire on states
that violate them and are silent on a real ragged run; an observation that
cannot be checked is a ValueError naming the field (Spec §3.9)."""

from __future__ import annotations

import copy

import pytest
import torch

from batchspec.reference.draft_policy import Fixed
from batchspec.invariants import CacheView, ForwardCall, Ledger, Observation, violations
from batchspec.invariants.ledger import direction, fingerprints
from batchspec.invariants.provenance import cache_provenance, committed_stream
from batchspec.reference import Models, decode, observation
from batchspec.testing import random_prompts


@pytest.fixture(scope="module")
def run(pairs):
    """Observations after every step of a ragged EQSPEC run (llama, mixed acceptance)."""
    target, draft = pairs("llama", "perturbed")
    prompts = random_prompts(seed=3, count=3, low=2, high=9)
    return [observation(e) for e in decode(Models(target, draft), prompts, [0, 1, 2], Fixed(3), 8, None) if e.state.batch]


def ledger_before(obs_list, n: int) -> Ledger:
    """The ledger after checking observations ``0 .. n-1`` in order (each silent)."""
    ledger = Ledger()
    for o in obs_list[:n]:
        assert violations(o, ledger=ledger) == []
    return ledger


def ragged_align(obs_list) -> int:
    return next(n for n, o in enumerate(obs_list) if o.step == "realign" and len(set(o.pad)) > 1)


def test_silent_on_every_step_of_a_valid_run(run):
    ledger_before(run, len(run))


def edited_cache(o, model, edit):
    o = copy.deepcopy(o)
    o.caches[model] = CacheView([(edit(k), edit(v)) for k, v in o.caches[model].layers])
    return o


@pytest.mark.parametrize("model", ["target", "draft"])
def test_I6_fires_on_cache_rows_taken_from_the_wrong_row(run, model):
    n = ragged_align(run)
    o = edited_cache(run[n], model, lambda t: t.roll(1, dims=0))
    found = cache_provenance(o, ledger_before(run, n))
    assert found and {(v.invariant, v.model) for v in found} == {("I6", model)}
    assert "holds another key" in found[0].detail or "holds the key written for token" in found[0].detail


def test_I6_fires_on_a_row_shifted_by_one_slot(run):
    n = ragged_align(run)
    row = max(range(len(run[n].pad)), key=lambda i: run[n].pad[i])  # a padded row: room to shift
    o = copy.deepcopy(run[n])
    for k, v in o.caches["target"].layers:
        k[row] = k[row].roll(-1, dims=1)
        v[row] = v[row].roll(-1, dims=1)
    found = cache_provenance(o, ledger_before(run, n))
    assert [(v.row, v.model) for v in found] == [(row, "target")]


def test_I6_fires_on_a_grid_token_no_call_fed(run):
    n = ragged_align(run)
    o = copy.deepcopy(run[n])
    o.tokens[0, o.pad[0]] = (o.tokens[0, o.pad[0]] + 1) % 96
    found = cache_provenance(o, ledger_before(run, n))
    assert {v.row for v in found} == {0} and "written for token" in found[0].detail


def test_I7_fires_when_the_grid_gains_another_token(run):
    n = ragged_align(run)
    assert committed_stream(run[n], ledger_before(run, n)) == []
    o = copy.deepcopy(run[n])
    o.tokens[1, -1] = (o.tokens[1, -1] + 1) % 96  # the rejected draft appended, say
    (v,) = committed_stream(o, ledger_before(run, n))
    assert (v.invariant, v.row) == ("I7", 1) and v.actual[-1] == int(o.tokens[1, -1])


def grid(rows, step="realign", committed=None):
    tokens = torch.tensor(rows)
    return Observation(1, step, tokens, torch.ones_like(tokens), [0] * len(rows), [len(r) for r in rows], {},
                       draft_tokens=tokens[:, :0], committed=committed)


def test_I7_accepts_a_prefix_only_of_what_a_recorder_derived():
    for derived, gained, fires in ((False, [5, 7], False), (False, [5], True), (True, [5], False),
                                   (True, [6], True), (True, [], False)):
        ledger = Ledger(derived=derived)
        ledger.remember_commits(grid([[1, 2]], "verify", [[5, 7]]))
        assert bool(committed_stream(grid([[1, 2] + gained]), ledger)) == fires, (derived, gained)


def test_glue_mistakes_are_value_errors_naming_the_field():
    call = ForwardCall("target", torch.tensor([[3]]), torch.ones(1, 3, dtype=torch.long), torch.tensor([[2]]), 2)
    cases = {
        "Observation.committed": grid([[1, 2, 3]], "verify"),
        "Observation.draft_tokens": Observation(1, "draft", torch.tensor([[1, 2, 3]]), torch.ones(1, 3), [0], [3], {}),
        "ForwardCall.model": Observation(1, "realign", torch.tensor([[1, 2, 3]]), torch.ones(1, 3), [0], [3], {},
                                         [ForwardCall("Target", *list(vars(call).values())[1:])]),
        "Observation.caches": Observation(1, "realign", torch.tensor([[1, 2, 3]]), torch.ones(1, 3), [0], [3],
                                          {"verifier": CacheView([])}),
        "Observation.step": Observation(1, "decode", torch.tensor([[1, 2, 3]]), torch.ones(1, 3), [0], [3], {}),
    }
    for field, obs in cases.items():
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            violations(obs)
    after = copy.deepcopy(call)
    after.cache_length = 3  # read after the call: the cache already holds the input
    kv = [(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))]
    obs = Observation(1, "verify", torch.tensor([[1, 2, 3]]), torch.ones(1, 3), [0], [3],
                      {"target": CacheView(kv)}, [after], draft_tokens=torch.zeros(1, 0, dtype=torch.long),
                      committed=[[4]])
    with pytest.raises(ValueError, match=r"ForwardCall\.cache_length .* read after the call"):
        violations(obs)


def test_the_ledger_keeps_its_tensors_on_the_cache_device():
    """Device-agnostic by construction: everything the ledger creates (the fixed
    direction, the table, its row index) lives on the device of the tensors it
    is given. Checked on the ``meta`` device (shapes only, no data), the one
    non-CPU device every machine has: a tensor made on the CPU by mistake
    meets a meta tensor in an operation and raises. (CUDA is not run here.)"""
    b, heads, t, n, dim, layers = 2, 2, 5, 3, 4, 3
    keys = torch.zeros(b, heads, t + n, dim, device="meta")
    view = CacheView([(keys, keys)] * layers)
    mask = torch.ones(b, t + n, dtype=torch.long, device="meta")
    call = ForwardCall("target", torch.zeros(b, n, dtype=torch.long, device="meta"), mask,
                       torch.zeros(b, n, dtype=torch.long, device="meta"), t)
    ledger = Ledger()
    ledger.record(call, view, [7, 8])
    table = ledger.tables["target"]
    assert table.entries.device.type == "meta" and table.index([7, 8]).device.type == "meta"
    assert fingerprints(view, t, t + n, call.input_ids).device.type == "meta"
    assert direction(keys).device.type == "meta"
    with pytest.raises(RuntimeError, match="device"):  # negative control: what a CPU-made direction would do
        keys * direction(torch.zeros(b, heads, 1, dim))


def test_stale_slots_are_the_ones_outside_the_tolerance():
    from batchspec.invariants.provenance import _stale

    live = torch.tensor([[True, True, False]])
    then = torch.tensor([[[0.5, -2.0, 7.0], [float("inf"), 1.0, 8.0], [3.0, 3.0, 9.0]]])

    def stale(now):
        return _stale(live, now, then).tolist()

    assert stale(then.clone()) == [[False, False, False]]
    close = then.clone()
    close[0, 0, 0] += 1e-6  # a reduction order apart: within float32's 1e-4
    close[0, 2] = torch.tensor([9.0, 9.0, 1.0])  # a masked slot may hold anything
    assert stale(close) == [[False, False, False]]  # and the equal infinity is within it
    far = then.clone()
    far[0, 0, 1] += 1e-2
    assert stale(far) == [[True, False, False]]
    nan = then.clone()
    nan[0, 1, 1] = float("nan")
    assert stale(nan) == [[False, True, False]]
    token = then.clone()
    token[0, 1, 2] = 9.0  # another token id: never within any tolerance
    assert stale(token) == [[False, True, False]]
