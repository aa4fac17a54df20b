"""``--sample`` for ``batchspec demo`` and ``batchspec compare``: sampled runs
scored against the per-position reference; bad sampling flags exit 2."""

from __future__ import annotations

import pytest
import json

from batchspec.cli import main


@pytest.mark.slow
def test_demo_sample_json(capsys):
    code = main(["demo", "--sample", "--temperature", "0.8", "--prompts", "2", "--batch-size", "2",
                 "--max-new-tokens", "6", "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0
    assert [r["method"] for r in rows] == ["AR sampled", "eqspec sampled", "eqspec greedy"]
    assert [r["exact"] for r in rows] == ["2/2", "2/2", "-"]
    sampled = rows[1]
    assert 1.0 <= sampled["tok/call"] <= 5.0 and 1.0 <= sampled["tok/call (α)"] <= 5.0
    assert rows[2]["tok/call (α)"] is None


def test_demo_rejects_a_bad_temperature(capsys):
    assert main(["demo", "--sample", "--temperature", "0", "--prompts", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "temperature" in err[0]


def test_compare_sample(capsys):
    code = main(["compare", "--pair", "tiny-llama", "--sample", "--top-k", "20", "--methods",
                 "eqspec,exspec,autoregressive", "--batch-sizes", "1,2", "--prompts", "2",
                 "--max-new-tokens", "6", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["settings"]["sampling"]["top_k"] == 20
    assert {(r["method"], r["batch_size"]) for r in report["rows"]} == \
        {(m, b) for m in ("eqspec", "exspec", "autoregressive") for b in (1, 2)}
    assert all(r["exact"] == 100.0 and r["violations"] == 0 for r in report["rows"])


def test_compare_sample_refuses_methods_that_cannot_sample(capsys):
    assert main(["compare", "--pair", "tiny-llama", "--sample", "--methods", "eqspec,masking"]) == 2
    assert "masking" in capsys.readouterr().err
