"""Conformance vectors (``batchspec.conformance``): exported, independently
right, passed by the reference decoder, failed by broken ones exactly where
their bug acts. One family (llama, 2 vectors) keeps the cost to seconds; the
export of every family is the same code per family."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from batchspec import faults
from batchspec.cli import main as cli
from batchspec.conformance import FORMAT, check, export, load_vector
from batchspec.conformance.run import compare, models, reference_decoder
from batchspec.testing import reference_greedy


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vectors")
    names = export(folder, families=("llama",), classes=())
    return folder, {n: load_vector(folder / f"{n}.json") for n in names}


def test_the_vectors_are_the_targets_own_greedy_decoding(vectors):
    folder, by_name = vectors
    assert sorted(by_name) == ["llama-eos-k2", "llama-ragged-k3"]
    assert (folder / "models/llama/target/model.safetensors").exists()
    for v in by_name.values():
        assert v["format"] == FORMAT
        target, _ = models(folder, v)
        eos = v["eos_token_id"] or None
        assert v["expected"]["sequences"] == [reference_greedy(target, p, v["max_new_tokens"], eos)
                                              for p in v["prompts"]]
        for r in v["expected"]["rounds"]:  # δ_i = L' - L - a_i for the rows that stay
            assert all(d is None or d == r["width"] - r["width_before"] - a
                       for d, a in zip(r["delta"], r["appended"]))
        assert any(len(set(r["appended"])) > 1 for r in v["expected"]["rounds"])  # ragged
    assert set(by_name["llama-eos-k2"]["expected"]["stop_reasons"]) == {"eos", "length"}


def test_the_reference_decoder_passes_every_vector(vectors):
    folder, by_name = vectors
    assert check(folder, reference_decoder) == {n: None for n in by_name}


def ignores_eos(target, draft, prompts, k, max_new_tokens, eos_token_id):
    return reference_decoder(target, draft, prompts, k, max_new_tokens, [])["sequences"]


def bonus_from_draft(target, draft, prompts, k, max_new_tokens, eos_token_id):
    return faults.run("bonus_from_draft", target, draft, prompts, num_draft_tokens=k,
                      max_new_tokens=max_new_tokens, eos_token_id=eos_token_id or None,
                      check_invariants=False).sequences


def test_broken_decoders_fail_exactly_the_vectors_where_their_bug_acts(vectors):
    folder, by_name = vectors
    results = check(folder, ignores_eos)
    assert {n for n, r in results.items() if r} == {n for n, v in by_name.items() if "eos" in
                                                     v["expected"]["stop_reasons"]}
    results = check(folder, bonus_from_draft)
    rejected = {n for n, v in by_name.items()
                if any(m < min(v["k"], v["max_new_tokens"]) for r in v["expected"]["rounds"] for m in r["accepted"])}
    assert {n for n, r in results.items() if r} == rejected and rejected
    assert all("differs at token" in r for r in results.values() if r)


def test_compare_names_what_differs(vectors):
    _, by_name = vectors
    v = by_name["llama-ragged-k3"]
    good = {"sequences": v["expected"]["sequences"], "rounds": v["expected"]["rounds"]}
    assert compare(v, good) is None and compare(v, good["sequences"]) is None
    bad_round = json.loads(json.dumps(good))
    bad_round["rounds"][1]["delta"][0] = 7
    assert compare(v, bad_round).startswith("round 2: delta expected")
    assert "prompt 1 differs at token 0" in compare(v, [s if i != 1 else [0] for i, s in enumerate(good["sequences"])])
    assert "not {'sequences'" in compare(v, {"tokens": []})


@pytest.mark.slow
def test_a_command_decoder_is_checked_on_one_vector(vectors, capsys):
    folder, _ = vectors
    command = f"{sys.executable} {Path(__file__).parents[1] / '_conformance_command.py'}"
    code = cli(["conformance", "check", str(folder), "--command", command, "--vectors", "llama-ragged-k3"])
    assert code == 0 and "PASS llama-ragged-k3" in capsys.readouterr().out


def test_cli_mistakes_exit_2(tmp_path, vectors, capsys):
    folder, _ = vectors
    assert cli(["conformance", "check", str(tmp_path), "--decoder", "x:y"]) == 2
    assert cli(["conformance", "check", str(folder), "--decoder", "m:f", "--command", "true"]) == 2
    assert cli(["conformance", "check", str(folder), "--decoder", "batchspec.conformance.run:nothing"]) == 2
    assert cli(["conformance", "export", str(tmp_path), "--families", "t5"]) == 2
    err = capsys.readouterr().err
    assert "no vectors" in err and "not both" in err and "nothing" in err and "t5" in err
