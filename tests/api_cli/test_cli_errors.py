"""The command line as a tool people script: every documented
mistake is one line on stderr naming the problem, exit status 2, no
traceback, before any model runs; nonsense is refused; ``| head`` is quiet.

In-process through :func:`batchspec.cli.main` (cheap), plus a few real
subprocesses (about 4 s each: they import torch and transformers).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from batchspec.cli import EXIT_CODES, main, parser
from batchspec.cli import common

MISTAKES = [  # argv, words the one line must contain (docs/errors.md lists the same)
    (["demo", "--batch-size", "0"], "argument --batch-size: expected a positive integer, got 0"),
    (["demo", "--k", "-1"], "argument -k/--k/--num-draft-tokens: expected a positive integer, 'auto' or 'confident', got -1"),
    (["demo", "--prompts", "0"], "argument --prompts: expected a positive integer, got 0"),
    (["demo", "--max-new-tokens", "x"], "argument --max-new-tokens: expected a positive integer, got 'x'"),
    (["compare", "--max-new-tokens", "0"], "argument --max-new-tokens: expected a positive integer, got 0"),
    (["demo", "--seed", "-1"], "argument --seed: expected an integer >= 0, got -1"),
    (["demo", "--pair", "nonesuch"], "argument --pair: invalid choice: 'nonesuch'"),
    (["demo", "--device", "gpu"], "argument --device: expected cpu, cuda, cuda:N or mps, got 'gpu'"),
    (["demo", "--device", "cuda:0"], "--device cuda:0: CUDA is not available here"),
    (["demo", "--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
    (["compare", "--batch-sizes", "0"], "argument --batch-sizes: expected a positive integer, got 0"),
    (["compare", "--batch-sizes", "1,,4"], "argument --batch-sizes: empty entry in '1,,4'"),
    (["compare", "--batch-sizes", "1,x"], "argument --batch-sizes: expected a positive integer, got 'x'"),
    (["compare", "--methods", "eqspec,nonesuch"], "--methods: unknown method(s) 'nonesuch'"),
    (["compare", "--methods", "eqspec,"], "--methods: unknown method(s) ''"),
    (["compare", "--pair", "qwen2.5-coder"], "--pair qwen2.5-coder: not fetched"),
    (["audit", "{tmp}/missing.jsonl"], "missing.jsonl: cannot read (No such file or directory)"),
    (["audit", "{tmp}/empty.jsonl"], "empty.jsonl: no records (an empty audit would pass on nothing)"),
    (["audit", "{tmp}/blank.jsonl"], "blank.jsonl: no records"),
    (["audit", "{tmp}/notjson.jsonl"], "notjson.jsonl, line 2: not JSON"),
    (["audit", "{tmp}/array.jsonl"], "array.jsonl, line 1: expected a JSON object, got list"),
    (["audit", "{tmp}/strings.jsonl"], "strings.jsonl, line 1: 'candidate' must be a list of integer token ids"),
    (["audit", "{tmp}/nokey.jsonl"], "nokey.jsonl, line 1: missing 'candidate'"),
    (["audit", "{tmp}/outputs.jsonl"], "lines hold 'output', not 'reference' and 'candidate'; pass the other"),
    (["audit", "{tmp}/ok.jsonl", "--candidate", "{tmp}/two.jsonl"], "ok.jsonl has 1 records, "),
    (["audit", "{tmp}/oov.jsonl", "--pair", "tiny-llama"], "candidates[0][1] = 500 is not a token id [0, 96)"),
    (["audit", "{tmp}/negative.jsonl", "--no-model"], "candidates[0][0] = -3 is not a token id >= 0"),
    (["audit", "{tmp}/ok.jsonl", "--target", "{tmp}/no-such-model"], "--target {tmp}/no-such-model: cannot load"),
    (["audit", "{tmp}/ok.jsonl", "--factor", "-1"], "argument --factor: expected a positive number, got '-1'"),
    (["audit", "{tmp}/ok.jsonl", "--target", "x", "--no-model"], "not allowed with argument --target"),
    (["models", "fetch", "nonesuch"], "unknown pair 'nonesuch'"),
    (["trace"], "batchspec trace: error: nothing to write: give --out FILE.jsonl and/or --html FILE.html"),
    (["trace", "--out", "{tmp}/no/dir/t.jsonl"], "cannot write {tmp}/no/dir/t.jsonl: folder {tmp}/no/dir does not"),
    (["trace", "--fault", "nonesuch", "--out", "{tmp}/t.jsonl"], "batchspec trace: error: unknown fault 'nonesuch'"),
    (["trace", "--method", "nonesuch", "--out", "{tmp}/t.jsonl"], "unknown method 'nonesuch'; known: "),
    (["conformance", "check", "{tmp}/nowhere"], "batchspec conformance: error: {tmp}/nowhere: no vectors (*.json)"),
    (["conformance", "export"], "the following arguments are required: dir"),
    (["bench", "--warmup", "-1"], "argument --warmup: expected an integer >= 0, got -1"),
    (["bench", "-k", "0"], "-k: expected comma-separated positive integers, 'auto' or 'confident'"),
    (["nonesuch"], "argument COMMAND: invalid choice: 'nonesuch'"),
    ([], "the following arguments are required: COMMAND"),
]

LINE = {"prompt": [3, 4], "reference": [5, 6], "candidate": [5, 6]}


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSPEC_CACHE", str(tmp_path / "cache"))  # the fetched pair is absent
    write = lambda name, text: (tmp_path / name).write_text(text)  # noqa: E731
    write("empty.jsonl", "")
    write("blank.jsonl", "\n  \n")
    write("ok.jsonl", json.dumps(LINE) + "\n")
    write("two.jsonl", json.dumps({"prompt": [3, 4], "output": [5]}) + "\n" * 2 +
          json.dumps({"prompt": [3, 4], "output": [5]}) + "\n")
    write("notjson.jsonl", json.dumps(LINE) + "\n{prompt: 1}\n")
    write("array.jsonl", "[1, 2]\n")
    write("strings.jsonl", json.dumps({**LINE, "candidate": ["5", "6"]}) + "\n")
    write("nokey.jsonl", json.dumps({"prompt": [3], "reference": [5]}) + "\n")
    write("outputs.jsonl", json.dumps({"prompt": [3], "output": [5]}) + "\n")
    write("oov.jsonl", json.dumps({**LINE, "candidate": [5, 500]}) + "\n")
    write("negative.jsonl", json.dumps({**LINE, "candidate": [-3]}) + "\n")
    write("differ.jsonl", json.dumps({**LINE, "candidate": [5, 7]}) + "\n")
    return tmp_path


@pytest.mark.parametrize("argv, words", MISTAKES, ids=[" ".join(a) or "nothing" for a, _ in MISTAKES])
def test_a_mistake_is_one_line_and_exit_2(files, capsys, monkeypatch, argv, words):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for a usage error")

    if "--pair" not in argv[1:] or argv[0] != "audit":  # out-of-vocabulary ids need the loaded vocabulary
        monkeypatch.setattr(common, "LoadedPair", no_model)
    argv = [a.replace("{tmp}", str(files)) for a in argv]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, err  # one line
    assert words.replace("{tmp}", str(files)) in err and "Traceback" not in err
    assert err.startswith("batchspec")
    assert captured.out == ""


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    from batchspec.cli import models

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "list_pairs", interrupted)
    assert main(["models", "list"]) == 130
    assert capsys.readouterr().err == "batchspec models: interrupted\n"


def test_audit_without_a_model_fails_when_outputs_differ(files, capsys):
    """Regression: ``--no-model`` exited 0 on differing outputs (a CI job would pass)."""
    assert main(["audit", str(files / "differ.jsonl"), "--no-model"]) == 1
    out = capsys.readouterr().out
    assert "1 unclassified" in out and max(map(len, out.splitlines())) <= 100
    assert main(["audit", str(files / "ok.jsonl"), "--no-model"]) == 0


def test_every_option_has_help_and_the_exit_codes_are_listed():
    top = parser()
    commands = top._subparsers._group_actions[0].choices
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings} has no help"
        nested = [a for a in command._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]
        for sub in nested:
            for subname, subparser in sub.choices.items():
                for action in subparser._actions:
                    assert action.help, f"{name} {subname} {action.option_strings} has no help"
    text = top.format_help()
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in text
    for help_text in [text] + [command.format_help() for command in commands.values()]:
        assert max(map(len, help_text.splitlines())) <= 100


def test_progress_bars_only_on_a_terminal_and_lines_into_a_log(monkeypatch, capsys):
    items = [1, 2, 3]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert list(common.progress(items, 3, "x", True)) == items
    assert capsys.readouterr().err == ""  # a quick run into a log: no line
    monkeypatch.setattr(common, "PROGRESS_EVERY", 0.0)
    assert list(common.progress(items, 3, "bench", True)) == items
    assert [line.split(" after ")[0] for line in capsys.readouterr().err.splitlines()] == [
        "bench: 0/3", "bench: 1/3", "bench: 2/3"]
    assert common.progress(items, 3, "x", False) is items  # --json
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert common.progress(items, 3, "x", False) is items  # --json
    bar = common.progress(items, 3, "x", True)
    assert bar is not items and list(bar) == items


def test_int_list_and_counts():
    assert common.int_list("1,4, 8") == [1, 4, 8]
    for text in ("", "1,", ",1", "1,,4", "0", "-2", "a"):
        with pytest.raises(Exception, match="expected|empty entry"):
            common.int_list(text)
    assert common.nonnegative_int("0") == 0 and common.positive_int("3") == 3


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_subprocess_mistakes_are_one_line_without_traceback(tmp_path):
    for argv, words in (("demo --batch-size 0", "expected a positive integer, got 0"),
                        (f"audit {tmp_path}/missing.jsonl", "cannot read")):
        done = run(f"{sys.executable} -m batchspec.cli {argv}")
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and words in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_subprocess_head_exits_quietly(tmp_path):
    """``| head`` closes the pipe long before the 20 000 JSON lines are written."""
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"prompt": [3], "reference": [i % 90], "candidate": [i % 90]}) + "\n"
                            for i in range(20000)))
    done = run(f"{sys.executable} -m batchspec.cli audit {path} --no-model --json | head -2")
    assert done.stdout.count("\n") == 2 and done.stderr == ""
    assert done.returncode == 141  # the writer's status under pipefail: quiet, as documented


def test_the_docs_list_the_exit_codes():
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    rows = {line.split("|")[1].strip() for line in page.splitlines() if line.startswith("| ")}
    assert {str(code) for code in EXIT_CODES} <= rows
    variants = {"compare --batch-sizes 1,x", "compare --methods eqspec,", "compare --max-new-tokens 0",
                "demo --seed -1", "nonesuch", ""}  # of listed rows
    for argv, words in MISTAKES:
        command = " ".join(argv)
        if "{tmp}" not in command and command not in variants:
            assert f"| `{command}" in page, command


def test_a_misspelled_option_gets_a_suggestion_and_none_is_abbreviated(capsys):
    from batchspec.cli import main

    assert main(["demo", "--bacth-size", "3"]) == 2
    assert "--bacth-size -> --batch-size" in capsys.readouterr().err
    assert main(["demo", "--max-new-token", "3"]) == 2  # was silently taken as --max-new-tokens
    assert "--max-new-tokens" in capsys.readouterr().err


def test_help_shows_no_raw_roles(capsys):
    from batchspec.cli import COMMANDS, main

    for command in COMMANDS:
        assert main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert ":mod:`" not in out and ":func:`" not in out and "``" not in out, command


def test_help_lines_read_as_sentences(capsys):
    """The demo's line and the --pair default say what they mean."""
    from batchspec.cli import main

    assert main(["--help"]) == 0
    top = " ".join(capsys.readouterr().out.split())
    assert "invariants on" not in top and "every invariant checked after every step" in top
    assert main(["demo", "--help"]) == 0
    demo = " ".join(capsys.readouterr().out.split())
    assert "default default" not in demo and "if omitted: the embedded byte-level pair, 'default'" in demo
