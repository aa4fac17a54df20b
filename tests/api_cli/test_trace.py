"""The recorded trace (``batchspec.trace``): recording changes nothing, the file
round-trips without the models, and its derived fields (provenance of cache
slots, δ_i, bonus) are what the tensors say, including on runs that break.

Scenario: the float64 tiny qwen3 pair and the ragged prompts of the fault
tests (round 2 is the first ragged round), k = 3, 10 new tokens. Cost: about
3 s on one core.
"""

from __future__ import annotations


import pytest

from _broken_helpers import K, N, RAGGED_AT_2, WITH_PAD_ID, pair, reference

import batchspec
from batchspec import trace

OPTIONS = dict(num_draft_tokens=K, max_new_tokens=N)


def traced(method="eqspec", prompts=WITH_PAD_ID, **extra):
    target, draft = pair("qwen3")
    return trace.record(target, draft, prompts, method, **OPTIONS, **extra)


@pytest.mark.parametrize("method", ["eqspec", "masking", "rollback", "dsd"])
def test_recording_changes_nothing_and_sees_what_the_checker_sees(method):
    target, draft = pair("qwen3")
    plain = batchspec.generate(target, draft, WITH_PAD_ID, method=method, check_invariants="record", **OPTIONS)
    recorded = traced(method)
    assert recorded.result["sequences"] == plain.sequences
    assert recorded.result["stop_reasons"] == plain.stop_reasons
    got = [(v["invariant"], v["round"], v["step"], v["row"], v["model"]) for v in recorded.violations]
    assert got == [(v.invariant, v.round, v.step, v.row, v.model) for v in plain.violations]
    assert sum(s["decision"] is not None for s in recorded.steps) == plain.stats.rounds


def test_masking_first_violation_is_i1_in_the_first_ragged_round():
    first = traced("masking", RAGGED_AT_2).first_violation()
    assert (first["invariant"], first["round"], first["step"]) == ("I1", 2, "realign")


def test_save_and_load_round_trip(tmp_path):
    recorded = traced("masking")
    path = tmp_path / "t.jsonl"
    recorded.save(path)
    lines = path.read_text().splitlines()
    assert len(lines) == len(recorded.steps) + 2  # header + steps + result
    loaded = trace.Trace.load(path)
    assert loaded.header == recorded.header and loaded.steps == recorded.steps
    assert loaded.result == recorded.result and loaded.header["prompts"] == WITH_PAD_ID
    (tmp_path / "bad.jsonl").write_text('{"kind": "header"}\n')
    with pytest.raises(ValueError, match="not a batchspec-trace"):
        trace.Trace.load(tmp_path / "bad.jsonl")


def test_decision_bonus_delta_and_leaving_match_the_grid():
    recorded = traced()
    rounds = [s for s in recorded.steps if s["decision"]]
    assert rounds and rounds[-1]["step"] == "finish"
    for s in rounds:
        d = s["decision"]
        verify = recorded.find(d["round"], "verify")["observation"]
        after = s["observation"]
        for i, request in enumerate(d["requests"]):
            row = verify["committed"][i]
            assert len(row) == d["appended"][i]
            assert d["bonus"][i] == (row[d["accepted"][i]] if len(row) > d["accepted"][i] else None)
            if request in d["leaving"]:
                assert d["delta"][i] is None
                continue
            j = after["requests"].index(request)
            assert d["delta"][i] == after["pad"][j] - verify["pad"][i]
            # Spec §4.4: the row's content is its old content plus the a_i committed tokens
            old = verify["tokens"][i][verify["pad"][i]:]
            assert after["tokens"][j][after["pad"][j]:] == old + row
    assert any(d != 0 for s in rounds if s["step"] == "realign" for d in s["decision"]["delta"] if d is not None)


def _content_sources(step, model="target"):
    """``(request, slot, source, token, grid token)`` of every committed cache slot after ``step``."""
    obs = step["observation"]
    cache = obs["caches"][model]
    for i, request in enumerate(obs["requests"]):
        for s in range(obs["pad"][i], min(len(obs["tokens"][i]) - 1, len(cache["source"][i]))):  # a lagging draft cache holds one fewer
            yield request, s, cache["source"][i][s], cache["token"][i][s], obs["tokens"][i][s]


def test_provenance_after_a_correct_realignment_is_the_shift_by_delta():
    recorded = traced()
    checked = 0
    for s in recorded.steps:
        if s["step"] != "realign":
            continue
        delta = dict(zip(s["decision"]["requests"], s["decision"]["delta"]))
        for model in ("target", "draft"):
            for request, slot, source, token, grid in _content_sources(s, model):
                assert source == [request, slot - delta[request]], (s["round"], model, request, slot)
                assert token == grid
                checked += 1
    assert checked > 50


def test_provenance_shows_a_permuted_gather():
    """The permuted_rows fault takes cache rows from the wrong batch row: the
    provenance names another request, and the cached token is not the grid's."""
    recorded = traced(fault="permuted_rows", prompts=RAGGED_AT_2)
    wrong = [(request, source) for s in recorded.steps if s["step"] == "realign"
             for request, _, source, token, grid in _content_sources(s) if source[0] != request]
    assert wrong
    first = recorded.first_violation()
    # the structural checks cannot see it; the default checks' I6 (cache provenance) can, at once
    assert (first["invariant"], first["round"], first["step"]) == ("I6", 2, "realign")


def test_semantic_fault_trace_names_the_invariant():
    recorded = traced(fault="permuted_rows", prompts=RAGGED_AT_2, semantic=True)
    first = recorded.first_violation()
    assert (first["invariant"], first["round"], first["step"]) == ("I3", 2, "realign")
    assert recorded.header["fault"] == "permuted_rows" and recorded.header["settings"]["semantic"]


def test_bad_arguments_are_named():
    target, draft = pair("qwen3")
    with pytest.raises(ValueError, match="fault must be one of"):
        trace.record(target, draft, RAGGED_AT_2, fault="nope")
    with pytest.raises(ValueError, match="method must be one of"):
        trace.record(target, draft, RAGGED_AT_2, "nope")
    with pytest.raises(ValueError, match="injected into EQSPEC"):
        trace.record(target, draft, RAGGED_AT_2, "masking", fault="permuted_rows")


def test_exact_output_is_unchanged_by_tracing_on_a_reference():
    recorded = traced(prompts=RAGGED_AT_2)
    assert recorded.result["sequences"] == reference("qwen3", RAGGED_AT_2)


def test_cli_writes_a_trace_that_loads(tmp_path, capsys):
    from batchspec.cli import main

    out = tmp_path / "t.jsonl"
    status = main(["trace", "--pair", "tiny-qwen3", "--method", "masking", "--batch-size", "4",
                   "--max-new-tokens", "8", "-k", "3", "--out", str(out)])
    assert status == 1 and "first I1" in capsys.readouterr().out  # violations: a check failed
    loaded = trace.Trace.load(out)
    assert loaded.header["method"] == "masking" and loaded.header["pair"] == "tiny-qwen3"
    assert loaded.first_violation()["invariant"] == "I1"


@pytest.mark.parametrize("argv, message", [
    (["--out", "x", "--fault", "nope"], "unknown fault 'nope'"),
    (["--out", "x", "--method", "nope"], "unknown method 'nope'"),
    (["--out", "x", "--method", "masking", "--fault", "permuted_rows"], "injected into EQSPEC"),
    (["--out", "x", "--pair", "nope"], "invalid choice: 'nope'"),
    (["--out", "x", "--batch-size", "0"], "expected a positive integer, got 0"),
    (["--out", "/no/such/folder/x.jsonl"], "does not exist"),
    ([], "nothing to write"),
])
def test_cli_usage_errors_exit_2_before_any_model(argv, message, capsys):
    from batchspec.cli import main

    assert main(["trace", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
