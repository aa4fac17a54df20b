"""``batchspec compare``: the analogue of the paper's Table 1 on a tiny pair."""

from __future__ import annotations

import json

import pytest

from _broken_helpers import RAGGED_AT_2, one_thread, pair  # noqa: F401

from batchspec.cli import main as cli
from batchspec.cli.compare import DEFAULT_PAIR, PAIRS, compare, table


@pytest.fixture(scope="module")
def rows():
    target, draft = pair("qwen3")
    found = compare(target, draft, RAGGED_AT_2, ["eqspec", "rollback", "masking", "dsd"], [1, 3],
                    k=3, max_new_tokens=10)
    return {(r.method, r.batch_size): r for r in found}


@pytest.mark.slow
def test_eqspec_and_rollback_rows(rows):
    for key in [("eqspec", 1), ("eqspec", 3), ("rollback", 1), ("rollback", 3)]:
        r = rows[key]
        assert (r.exact, r.partial, r.first_violation, r.violations) == (100.0, 100.0, None, 0), key
    assert rows["rollback", 1].wasted_tokens == 0 < rows["rollback", 3].wasted_tokens
    assert rows["rollback", 3].tokens_per_target_call < rows["eqspec", 3].tokens_per_target_call
    assert 1 <= rows["eqspec", 3].tokens_per_target_call <= 4  # 1 .. k + 1


def test_broken_rows(rows):
    assert rows["masking", 1].first_violation is None and rows["masking", 1].exact == 100.0
    assert rows["masking", 3].first_violation == ("I1", 2) and rows["masking", 3].exact < 100
    assert rows["dsd", 1].first_violation[0] == "I5" and rows["dsd", 1].exact < 100
    assert rows["dsd", 3].first_violation == ("I1", 0)
    assert all(r.wasted_tokens == 0 for (m, _), r in rows.items() if m != "rollback")


def test_table_text(rows):
    text = table(list(rows.values()))
    head = text.splitlines()[0]
    for column in ("method", "batch", "exact %", "partial %", "first violation", "tokens/target call",
                   "wasted verified"):
        assert column in head
    assert "I1, round 2" in text and len(text.splitlines()) == 2 + len(rows)


def test_cli_json(capsys):
    assert DEFAULT_PAIR in PAIRS
    code = cli(["compare", "--pair", "tiny-llama", "--methods", "eqspec,masking", "--batch-sizes", "1,2",
                "--prompts", "2", "--max-new-tokens", "6", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["pair"] == "tiny-llama"
    assert [(r["method"], r["batch_size"]) for r in data["rows"]] == \
        [("eqspec", 1), ("eqspec", 2), ("masking", 1), ("masking", 2)]
    assert data["rows"][0]["exact"] == 100.0


def test_cli_rejects_an_unknown_method(capsys):
    assert cli(["compare", "--methods", "nonesuch", "--prompts", "1"]) == 2
    assert "unknown method(s) 'nonesuch'" in capsys.readouterr().err
