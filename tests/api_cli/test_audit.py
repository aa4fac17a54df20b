"""The equivalence auditor: exact / partial match, and numeric near-tie vs algorithmic.

The numeric case is built honestly: a float64 tiny Llama's output head is
edited so that, after a known prefix, two tokens are tied to within 1e-3 of
one low-precision ulp; float64 picks one, the float16 (or bfloat16) copy of the
same model picks the other by rounding alone. The algorithmic cases are the
masking and DSD baselines' outputs.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from _broken_helpers import K, N, RAGGED_AT_2, one_thread, pair, reference  # noqa: F401

import batchspec
from batchspec.audit import ALGORITHMIC, NUMERIC, UNCLASSIFIED, compare_one, tolerance
from batchspec.cli import main as cli
from batchspec.models import tiny

PROMPT, TIE_AT = [13, 41, 89, 42], 2


def greedy(model, prompt, n=6):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@torch.no_grad()
def near_tie(low: torch.dtype):
    """``(model64, reference64, candidate_low)`` that diverge at ``TIE_AT`` by rounding only."""
    model = tiny.build("llama", 0)
    prefix = PROMPT + greedy(model, PROMPT)[:TIE_AT]
    last = lambda m: m.model(input_ids=torch.tensor([prefix])).last_hidden_state[0, -1]  # noqa: E731
    h, head = last(model), model.lm_head.weight
    a, b = (head @ h).topk(2).indices.tolist()
    head[b] += (head[a] @ h - head[b] @ h) * h / (h @ h)  # exact tie in float64
    low_logits = copy.deepcopy(model).to(low).lm_head.weight @ last(copy.deepcopy(model).to(low))
    d = float(low_logits[a] - low_logits[b])  # what rounding in `low` makes of the tie
    assert d != 0
    head[b] += 1e-3 * d * h / (h @ h)  # float64 now prefers the token `low` does not
    return model, greedy(model, PROMPT), greedy(copy.deepcopy(model).to(low), PROMPT)


def test_compare_one_literal_cases():
    same = compare_one(0, [1, 2, 3, 4], [1, 2, 3, 4])
    assert (same.exact, same.partial, same.first_divergence) == (True, 1.0, None)
    token = compare_one(1, [1, 2, 3, 4], [1, 2, 5, 4])
    assert (token.exact, token.matched, token.partial, token.first_divergence, token.reason) == \
        (False, 2, 0.5, 2, "token")
    assert (token.reference_token, token.candidate_token) == (3, 5)
    short = compare_one(2, [1, 2, 3, 4], [1, 2])
    assert (short.first_divergence, short.reason, short.partial, short.candidate_token) == \
        (2, "length", 0.5, None)
    longer = compare_one(3, [1, 2], [1, 2, 7])
    assert (longer.exact, longer.partial, longer.reason) == (False, 1.0, "length")
    assert compare_one(4, [], []).partial == 1.0


def test_tolerance_scales_with_the_precision_and_the_logits():
    logits = torch.tensor([3.0, -1.0])
    assert tolerance(torch.float16, logits) == pytest.approx(16 * 2 ** -10 * 3)
    assert tolerance(torch.bfloat16, logits) == pytest.approx(16 * 2 ** -7 * 3)
    assert tolerance(torch.float64, torch.tensor([0.1])) == pytest.approx(16 * 2 ** -52)  # scale floor 1
    assert tolerance(torch.float32, logits) < tolerance(torch.float16, logits) \
        < tolerance(torch.bfloat16, logits)


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
def test_a_genuine_near_tie_in_low_precision_is_numeric(low):
    model, ref, cand = near_tie(low)
    assert ref[:TIE_AT] == cand[:TIE_AT] and ref[TIE_AT] != cand[TIE_AT]  # the construction worked
    report = batchspec.audit([PROMPT], [ref], [cand], target=model, dtype=low)
    (p,) = report.prompts
    assert (p.first_divergence, p.reason, p.classification) == (TIE_AT, "token", NUMERIC)
    assert p.gap == pytest.approx(p.margin) and p.gap < p.tolerance  # the two tokens are the top 2
    # the same divergence is not explained by float64 rounding
    strict = batchspec.audit([PROMPT], [ref], [cand], target=model, dtype=torch.float64)
    assert strict.prompts[0].classification == ALGORITHMIC


@pytest.mark.parametrize("method", ["masking", "dsd"])
def test_baseline_divergences_are_algorithmic(method):
    target, draft = pair("qwen3")
    result = batchspec.generate(target, draft, RAGGED_AT_2, method=method, num_draft_tokens=K, max_new_tokens=N)
    expected = reference("qwen3", RAGGED_AT_2)
    # even under float16's looser tolerance, no divergence is a near-tie
    report = batchspec.audit(RAGGED_AT_2, expected, result.sequences, target=target, dtype=torch.float16)
    divergent = [p for p in report.prompts if not p.exact]
    assert divergent and all(p.classification == ALGORITHMIC for p in divergent)
    assert all(p.gap > p.tolerance for p in divergent if p.reason == "token")
    assert report.counts[ALGORITHMIC] == len(divergent)
    assert report.exact_rate < 1 and report.partial_rate < 1


def test_audit_without_a_model_leaves_divergences_unclassified():
    report = batchspec.audit([[5]], [[1, 2]], [[1, 3]])
    assert report.prompts[0].classification == UNCLASSIFIED and report.prompts[0].margin is None


def test_audit_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="differ in number"):
        batchspec.audit([[1]], [[1]], [])


def test_cli_one_file_jsonl(tmp_path, capsys):
    target, draft = pair("qwen3")
    result = batchspec.generate(target, draft, RAGGED_AT_2, method="dsd", num_draft_tokens=K, max_new_tokens=N)
    expected = reference("qwen3", RAGGED_AT_2)
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "reference": r, "candidate": c}) + "\n"
                            for p, r, c in zip(RAGGED_AT_2, expected, result.sequences)))
    assert cli(["audit", str(path), "--pair", "tiny-qwen3", "--json"]) == 1  # algorithmic found
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2]
    assert {line["classification"] for line in lines if not line["exact"]} == {ALGORITHMIC}


def test_cli_two_files_table(tmp_path, capsys):
    ref, cand = tmp_path / "ref.jsonl", tmp_path / "cand.jsonl"
    ref.write_text(json.dumps({"prompt": [5, 6], "output": [1, 2, 3]}) + "\n")
    cand.write_text(json.dumps({"prompt": [5, 6], "output": [1, 2, 3]}) + "\n")
    assert cli(["audit", str(ref), "--candidate", str(cand), "--no-model"]) == 0
    out = capsys.readouterr().out
    assert "exact 100.0%" in out and "diverges at" in out
    cand.write_text(json.dumps({"prompt": [5, 7], "output": [1]}) + "\n")
    assert cli(["audit", str(ref), "--candidate", str(cand), "--no-model"]) == 2
    assert "different prompts" in capsys.readouterr().err


def test_cli_no_model_fails_when_outputs_differ(tmp_path, capsys):
    """Without a model nothing can be classified, so any difference is a failure (exit 1):
    CI that runs ``--no-model`` must not pass a divergent engine."""
    ref, cand = tmp_path / "ref.jsonl", tmp_path / "cand.jsonl"
    ref.write_text(json.dumps({"prompt": [5, 6], "output": [1, 2, 3]}) + "\n")
    cand.write_text(json.dumps({"prompt": [5, 6], "output": [1, 2, 4]}) + "\n")
    assert cli(["audit", str(ref), "--candidate", str(cand), "--no-model"]) == 1
    assert "unclassified" in capsys.readouterr().out
