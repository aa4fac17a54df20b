"""The command line the first time a reader tries it: what the README and the help
promise holds. ``--help`` starts without torch; a misspelled option is answered by
the command that was given it; a trace that breaks an invariant exits 1 (its test
is in test_trace.py); ``conformance check`` runs batchspec's own decoder unless told
otherwise, and a decoder of another signature is told the signature once; the
README's demo table shows the counts the demo prints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from batchspec.cli import COMMANDS, main, parser

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers")

LOADED_AFTER = """
import contextlib, io, json, sys
from batchspec.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    status = main({argv!r})
print(json.dumps({{"status": status, "heavy": [m for m in {heavy!r} if m in sys.modules],
                  "help": out.getvalue()}}))
"""


def loaded_after(argv: list[str]) -> dict:
    """Run ``batchspec ARGV`` in a fresh interpreter: its status, its output, and which of
    torch and transformers it imported."""
    done = subprocess.run([sys.executable, "-c", LOADED_AFTER.format(argv=argv, heavy=HEAVY)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_help_and_version_load_neither_torch_nor_transformers():
    shown = loaded_after(["--help"])
    assert shown["status"] == 0 and shown["heavy"] == []
    assert all(name in shown["help"] for name in COMMANDS)
    assert loaded_after(["--version"])["heavy"] == []


@pytest.mark.slow
def test_the_check_of_loaded_modules_would_see_a_command_that_loads_torch():
    """The measure above can fail: a command's help imports its module, and with it torch."""
    assert "torch" in loaded_after(["demo", "--help"])["heavy"]


def test_the_top_level_lines_are_the_commands_own():
    """``--help`` lists each command by the line its module registers, without importing it."""
    full = parser()
    listed = {a.dest: a.help for a in full._subparsers._group_actions[0]._choices_actions}
    assert listed == COMMANDS


@pytest.mark.parametrize("argv, line", [
    (["bench", "--method", "eqspec"],
     "batchspec bench: error: unrecognized arguments: --method eqspec; did you mean: --method -> --methods? "
     "(see batchspec bench --help)\n"),
    (["demo", "--bacth-size", "3"],
     "batchspec demo: error: unrecognized arguments: --bacth-size 3; did you mean: --bacth-size -> --batch-size? "
     "(see batchspec demo --help)\n"),
    (["conformance", "check", "vectors", "--greedyonly"],
     "batchspec conformance check: error: unrecognized arguments: --greedyonly; did you mean: "
     "--greedyonly -> --greedy-only? (see batchspec conformance check --help)\n"),
])
def test_a_mistake_in_a_command_points_to_that_commands_option_and_help(argv, line, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err == line


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    from batchspec.conformance import export

    folder = tmp_path_factory.mktemp("vectors")
    export(folder, families=("llama",), classes=())
    return folder


def test_conformance_check_runs_the_reference_decoder_by_default(vectors, capsys):
    assert "default: batchspec.conformance.run:reference_decoder" in " ".join(
        parser(("conformance",))._subparsers._group_actions[0].choices["conformance"]
        ._subparsers._group_actions[0].choices["check"].format_help().split())
    assert main(["conformance", "check", str(vectors)]) == 0
    assert capsys.readouterr().out.endswith("2/2 vectors pass\n")


def test_a_decoder_of_another_signature_is_told_the_signature_once(vectors, capsys):
    """The README's outside decoder takes (target, draft, prompts, k, n, on_boundary, ...):
    it binds the six arguments but calls the EOS list as its on_boundary hook."""
    from batchspec.conformance.run import SIGNATURE

    assert main(["conformance", "check", str(vectors), "--decoder", "batchspec.examples.outside_decoder:decode"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"FAIL llama-eos-k2 and 1 more vector: the decoder raised TypeError: 'list' object is not "
                   f"callable ({SIGNATURE})", "0/2 vectors pass"]
    assert main(["conformance", "check", str(vectors), "--decoder", "batchspec.examples.outside_decoder:left_pad"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(SIGNATURE) and "too many positional arguments" in err


def test_the_outside_decoder_passes_with_the_checkers_signature(vectors, capsys):
    assert main(["conformance", "check", str(vectors), "--decoder",
                 "batchspec.examples.outside_decoder:decode_vector", "--greedy-only"]) == 0
    assert capsys.readouterr().out.endswith("2/2 vectors pass\n")


README_ROW = re.compile(r"^\s*(autoregressive|eqspec)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s", re.M)


def readme_demo_block() -> str:
    """The README's block of what ``batchspec demo`` prints."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("```text\n        method") + len("```text\n"):]
    return block[:block.index("```")]


def readme_demo_rows(printed: str | None = None) -> dict:
    """The demo table's rows in ``printed`` (default: the README's block): method ->
    (exact, tok/call, accept, target, draft)."""
    return {m: rest for m, *rest in README_ROW.findall(readme_demo_block() if printed is None else printed)}


@pytest.mark.slow
def test_the_readme_demo_table_shows_what_the_demo_prints(capsys):
    """``batchspec demo`` as the README runs it (its defaults): the counts of its table and
    the continuations under it; the time columns vary by machine."""
    assert main(["demo"]) == 0
    printed = capsys.readouterr().out
    assert readme_demo_rows() == readme_demo_rows(printed)
    continuations = [line for line in readme_demo_block().splitlines() if line.startswith(("... ", "    -> "))]
    assert continuations and "\n".join(continuations) in printed


def test_the_readme_table_reader_sees_a_wrong_count():
    """The parse the comparison above relies on reads the numbers, so a wrong count would differ."""
    rows = readme_demo_rows()
    assert set(rows) == {"autoregressive", "eqspec"} and all(len(r) == 5 for r in rows.values())
    assert rows["eqspec"][3].isdigit() and int(rows["eqspec"][3]) < int(rows["autoregressive"][3])
