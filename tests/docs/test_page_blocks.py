"""Every fenced block that README.md and the hand-written site pages show
(docs/*.md and the index pages of the tutorials and the real-pair pages; the
spec's blocks are tested in test_spec_docs.py) is accounted for in
:data:`BLOCKS`: run by a test of this file (``here``), run by a named test
elsewhere (``test``), or allow-listed with its reason (``allow``: it installs
from the network, needs the real pair or a GPU, runs the whole suite or a
benchmark of minutes, or names the reader's own decoder). A block the
inventory does not know fails here, and every ``batchspec`` command shown in
any block, allow-listed ones included, must parse with the CLI's own parser.

What is run here prints what the page shows: the page's text blocks are
compared with what the code prints. Models: the embedded default pair (2.9 MB;
loaded again only where a block loads it itself) and the tiny float64 Qwen3 pair
of the fault tests. Cost: about 50 s on one core, 30 of them chapter 5 in a Jupyter
kernel.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md"))),
         "docs/tutorials/index.md", "docs/real-pair/index.md"]
FENCE = re.compile(r"^ *```(\S*)[^\n]*\n(.*?)^ *```", re.S | re.M)

NETWORK = "installs from the network (pip, a 9.6 GB fetch or the Hugging Face hub)"
WHOLE_SUITE = "the whole test suite (CI itself, 7+ min); the core's commands are run by the tests it runs"
REAL_PAIR = "needs the fetched Qwen2.5-Coder pair (marked `realpair` where it is a test)"

#: (page, first line of the block) -> (how, what): "here" and a test of this file,
#: "test" and "path::test" that runs it, or "allow" and why it is not run
BLOCKS = {
    ("README.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[dev]" && '
                  "batchspec demo"):
        ("allow", NETWORK + "; its `batchspec demo`, as written, is run by "
                            "tests/api_cli/test_cli_doors.py::test_the_readme_demo_table_shows_what_the_demo_prints"),
    ("README.md", ". .venv/bin/activate && python -m pytest"): ("allow", WHOLE_SUITE),
    ("README.md", "        method   exact  tok/call  accept  target  draft  time s  check s  speedup"):
        ("test", "tests/api_cli/test_cli_doors.py::test_the_readme_demo_table_shows_what_the_demo_prints"),
    ("README.md", "pip install torch --index-url https://download.pytorch.org/whl/cpu"): ("allow", NETWORK),
    ("README.md", "pip install torch"): ("allow", NETWORK),
    ("README.md", "import torch"):
        ("test", "tests/api_cli/test_hf_generate_checked.py::test_the_docs_page_and_the_readme_run_as_printed"),
    ("README.md", "import torch (2)"): ("test", "tests/docs/test_readme.py::test_the_readme_python_runs_when_pasted"),
    ("README.md", "from batchspec.examples.outside_decoder import decode as my_decoder  # a decoder batchspec "
                  "did not write"): ("test", "tests/docs/test_readme.py::test_the_readme_python_runs_when_pasted"),
    ("docs/benchmarks.md", "pip install -e '.[bench]'        # matplotlib, for --plots"):
        ("allow", NETWORK + "; a one-minute benchmark, the real pair (16 minutes) and a GPU script "
                            "(its arguments are parsed here)"),
    ("docs/check-your-decoder.md", "from batchspec.invariants import watch"): ("here", "test_check_your_decoder"),
    ("docs/check-your-decoder.md", '--8<-- "batchspec/examples/outside_decoder.py:decoder"'):
        ("test", "tests/invariants/test_correctness_invariants.py::"
                 "test_each_outside_bug_is_caught_at_its_first_wrong_call"),
    ("docs/check-your-decoder.md", "C1 one_chain violated at call #17, row 0, model 'target': row 0: slot 2, "
                                   "element 0 of the chain,"): ("here", "test_check_your_decoder"),
    ("docs/check-your-decoder.md", "C1 one_chain violated at call #13, row 1: target call #22, row 1, attends "
                                   "from its cache (slot 13)"): ("here", "test_check_your_decoder"),
    ("docs/check-your-decoder.md", "C1 one_chain violated at call #8, row 3, model 'draft': row 3 masks out "
                                   "slot 8, which holds token 0"): ("here", "test_check_your_decoder"),
    ("docs/check-your-decoder.md", "from batchspec.invariants import Ledger, Observation, ForwardCall, "
                                   "CacheView, check"): ("here", "test_hand_filled_observations"),
    ("docs/check-your-decoder.md", "batchspec conformance export vectors/"):
        ("allow", "`mypkg.decoder:decode` and `./my-decoder` are the reader's own decoder; export and check with "
                  "batchspec's decoders run in tests/api_cli/test_cli_doors.py (arguments parsed here)"),
    ("docs/from-transformers.md", "import torch"):
        ("test", "tests/api_cli/test_hf_generate_checked.py::test_the_docs_page_and_the_readme_run_as_printed"),
    ("docs/from-transformers.md", "transformers: assisted generate is only supported for batch_size = 1"):
        ("test", "tests/api_cli/test_hf_generate_checked.py::test_the_docs_page_and_the_readme_run_as_printed"),
    ("docs/from-transformers.md", "from transformers import pipeline"): ("here", "test_from_transformers_pipeline"),
    ("docs/from-transformers.md", "$ python benchmarks/hf_generate.py"):
        ("allow", "a measured benchmark run (minutes; wall and CPU times vary by machine and load)"),
    ("docs/from-transformers.md", "batch  method               wall s   cpu s  tok/s        speed-up          cost"):
        ("allow", "the second measured benchmark run (times vary by machine and load)"),
    ("docs/in-the-wild.md", "def assisted(prompt):"): ("here", "test_in_the_wild_assisted"),
    ("docs/in-the-wild.md", "C1 one_chain violated at call #5, row 0, model 'draft':"):
        ("here", "test_in_the_wild_assisted"),
    ("docs/in-the-wild.md", "python -m pytest -q tests/invariants/test_watch_hf_assisted.py"):
        ("test", "tests/invariants/test_watch_hf_assisted.py::test_assisted_generation_is_exact_and_silent"),
    ("docs/in-the-wild.md", "FAIL eos_in_prompt-qwen3: prompt 0 differs at token 0: expected [72, 63, 86]..., "
                            "got []... (class"):
        ("allow", "the authors' public code (eBay/spec_dec) behind an adapter: not in this repository"),
    ("docs/in-the-wild.md", "batchspec conformance export vectors/"):
        ("allow", "`adapter:decode` is the authors' code behind an adapter, not in this repository "
                  "(arguments parsed here)"),
    ("docs/index.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[dev]" && '
                      "batchspec demo"):
        ("test", "tests/docs/test_docs_pages.py::test_the_home_page_shows_the_picture_the_reading_path_and_the_two_"
                 "commands"),
    ("docs/index.md", ". .venv/bin/activate && python -m pytest"):
        ("test", "tests/docs/test_docs_pages.py::test_the_home_page_shows_the_picture_the_reading_path_and_the_two_"
                 "commands"),
    ("docs/models.md", "$ batchspec models list"): ("here", "test_models_page"),
    ("docs/models.md", "from batchspec.models.registry import availability, load_pair"): ("here", "test_models_page"),
    ("docs/models.md", "batchspec models fetch qwen2.5-coder"): ("allow", NETWORK + "; " + REAL_PAIR),
    ("docs/models.md", "hf download Qwen/Qwen3-8B; hf download Qwen/Qwen3-0.6B"):
        ("allow", NETWORK + "; the paper's pairs need a GPU"),
    ("docs/quickstart.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[dev]"'):
        ("allow", NETWORK),
    ("docs/quickstart.md", "import torch"): ("test", "tests/docs/test_docs_pages.py::test_quickstart_runs_as_printed"),
    ("docs/quickstart.md", "'class Queue:\\n    def __init__(self, self, self.__dirs_____'"):
        ("test", "tests/docs/test_docs_pages.py::test_quickstart_runs_as_printed"),
    ("docs/quickstart.md", 'baseline = batchspec.generate(target, None, ids, method="autoregressive", '
                           "max_new_tokens=24)"):
        ("test", "tests/docs/test_docs_pages.py::test_quickstart_runs_as_printed"),
    ("docs/tutorials/index.md", "python docsbuild/harness.py"):
        ("test", "tests/docs/test_tutorials.py::test_every_tutorial_executes"),
    ("docs/tutorials/index.md", "BATCHSPEC_TUTORIAL_PAIR=qwen2.5-coder BATCHSPEC_TUTORIAL_DEVICE=cuda python "
                                "docsbuild/harness.py"): ("allow", REAL_PAIR + " and a GPU"),
    ("docs/tutorials/index.md", 'pip install -e ".[notebooks]"                    # JupyterLab, jupytext and a '
                                "Python kernel"): ("allow", NETWORK + "; then an interactive JupyterLab"),
    ("docs/tutorials/index.md", "jupytext --to ipynb --set-kernel python3 --execute "
                                "tutorials/05_eqspec_step_by_step.py \\"):
        ("here", "test_a_tutorial_executes_headless_as_the_page_says"),
    ("docs/real-pair/index.md", "batchspec models fetch qwen2.5-coder  # once: 9.6 GB, 3.5 min"):
        ("allow", NETWORK + "; " + REAL_PAIR + "; the pages it makes are checked by "
                  "tests/docs/test_real_pair_pages.py"),
}


class Block(NamedTuple):
    page: str
    lang: str
    body: str
    key: tuple[str, str]  # (page, first line), the first line followed by " (n)" on its n-th block of a page


def fenced(page: str, text: str | None = None) -> list[Block]:
    text = (ROOT / page).read_text() if text is None else text
    blocks, seen = [], {}
    for lang, body in FENCE.findall(text):
        first = body.splitlines()[0] if body else ""
        seen[first] = seen.get(first, 0) + 1
        blocks.append(Block(page, lang, body, (page, first if seen[first] == 1 else f"{first} ({seen[first]})")))
    return blocks


def shown(page: str, first: str) -> Block:
    return next(b for b in fenced(page) if b.key == (page, first))


def unaccounted(blocks: list[Block]) -> list[tuple[str, str]]:
    return [b.key for b in blocks if b.key not in BLOCKS]


def same_text(printed: str, block: Block) -> bool:
    """``printed`` is the block's text, line breaks and indentation aside (pages wrap long lines)."""
    return printed.split() == block.body.split()


def test_every_block_is_accounted_for():
    blocks = [b for page in PAGES for b in fenced(page)]
    assert len(blocks) >= 40 and unaccounted(blocks) == [] and len({b.key for b in blocks}) == len(blocks)
    assert set(BLOCKS) <= {b.key for b in blocks}, "an entry names a block that no page shows"
    for how, what in BLOCKS.values():
        if how == "here":
            assert callable(globals().get(what)), what
        elif how == "test":
            path, name = what.split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), what
        else:
            assert how == "allow" and len(what) > 20, what


def test_an_unknown_or_broken_block_fails():
    """The inventory fires on a block it does not know; the text comparison on a wrong figure."""
    planted = fenced("docs/quickstart.md", "```python\nimport batchspec\nbatchspec.generate(target)\n```\n")
    assert unaccounted(planted) == [("docs/quickstart.md", "import batchspec")]
    block = shown("docs/in-the-wild.md", "C1 one_chain violated at call #5, row 0, model 'draft':")
    assert same_text(block.body.replace("\n  ", " "), block)
    assert not same_text(block.body.replace("#5", "#6"), block)
    with pytest.raises(NameError):
        run(planted[0], {})


def commands(block: Block) -> list[list[str]]:
    """The ``batchspec`` command lines of a shell block, as argument lists (comments dropped)."""
    lines = block.body.replace("\\\n", " ").splitlines()
    return [shlex.split(line.removeprefix("$ "), comments=True)[1:] for line in lines
            if line.removeprefix("$ ").startswith("batchspec ")]


def test_every_batchspec_command_shown_parses():
    """Allow-listed or not, each command's options exist (parsed by the CLI's own parser, nothing run)."""
    from batchspec.cli import named_command, parser

    argvs = [argv for page in PAGES for b in fenced(page) if b.lang in ("bash", "") for argv in commands(b)]
    assert len(argvs) >= 8
    for argv in argvs:
        parser(named_command(argv)).parse_args(argv)  # argparse exits on an unknown option
    with pytest.raises(SystemExit):
        parser(("bench",)).parse_args(["bench", "--method", "eqspec"])  # the parse fails on a wrong option


@functools.lru_cache(maxsize=None)
def default_pair():
    from batchspec.models.default_pair import load_default_pair

    torch.set_num_threads(1)
    return load_default_pair(torch.float64)


def run(block: Block, namespace: dict) -> dict:
    exec(compile(block.body, block.page, "exec"), namespace)
    return namespace


def test_check_your_decoder(capsys):
    """The three lines on the default pair with the outside decoder, then the three planted
    bugs' first violations as the page shows them (the scenario the page names)."""
    from _broken_helpers import K, N, WITH_PAD_ID, pair

    from batchspec.examples import outside_decoder as outside
    from batchspec.invariants import watch

    page = "docs/check-your-decoder.md"
    target, draft = default_pair()
    prompts = [list(b"class Queue:\n    def __init__(self"), list(b"import os\n\n\ndef main(")]
    namespace = run(shown(page, "from batchspec.invariants import watch"),
                    {"target": target, "draft": draft, "prompts": prompts, "eos": None,
                     "my_decoder": lambda t, d, p: outside.decode(t, d, p, 3, 32)})
    assert namespace["w"].violations == [] and len(namespace["out"][0]) == 32
    target, draft = pair("qwen3")
    for bug, first in (("batch_min", "C1 one_chain violated at call #17"),
                       ("rejected", "C1 one_chain violated at call #13"),
                       ("pad_from_ids", "C1 one_chain violated at call #8")):
        with watch(target=target, draft=draft, check="record") as w:
            out = outside.decode(target, draft, WITH_PAD_ID, K, N, bug=bug)
            w.outputs(WITH_PAD_ID, out, max_new_tokens=N)
        block = next(b for b in fenced(page) if b.body.startswith(first))
        assert same_text(str(w.violations[0]), block), (bug, str(w.violations[0]))


def test_hand_filled_observations():
    """The hand-filled loop over the reference decoder's observations of a ragged batch;
    the same loop raises on an observation whose positions were tampered with."""
    from batchspec.invariants import InvariantViolation
    from batchspec.reference import Models, decode, observation
    from batchspec.reference.draft_policy import Fixed

    target, draft = default_pair()
    prompts = [list(b"def f(x):\n    return "), list(b"import os")]

    def my_observations(tamper=False):
        for event in decode(Models(target, draft), prompts, [0, 1], Fixed(3), 12, None):
            if not event.state.batch:  # the last event: every row has left
                continue
            obs = observation(event)
            if tamper and obs.calls:
                obs.calls[0].position_ids += 1
            yield obs

    block = shown("docs/check-your-decoder.md", "from batchspec.invariants import Ledger, Observation, ForwardCall, "
                                                "CacheView, check")
    namespace = run(block, {"my_observations": my_observations})
    assert namespace["obs"] is not None  # the loop saw observations and none raised
    with pytest.raises(InvariantViolation):
        run(block, {"my_observations": lambda: my_observations(tamper=True)})


def test_from_transformers_pipeline():
    """The pipeline block, after the page's first block's names (pair, tokenizer, prompts):
    the texts equal the target's plain greedy continuations."""
    import batchspec.hf
    from batchspec.models.bytes import hf_tokenizer

    target, draft = default_pair()
    page = "docs/from-transformers.md"
    first = shown(page, "import torch").body
    prompts = eval(first[first.index("prompts = ") + len("prompts = "):first.index("\nenc = ")])
    tokenizer = hf_tokenizer(padding_side="left")
    texts = run(shown(page, "from transformers import pipeline"),
                {"target": target, "draft": draft, "tokenizer": tokenizer, "prompts": prompts,
                 "batchspec": batchspec})["texts"]
    enc = tokenizer(prompts, padding=True, return_tensors="pt")
    plain = target.generate(**enc, max_new_tokens=16)[:, enc["input_ids"].shape[1]:]
    assert [t[0]["generated_text"] for t in texts] == tokenizer.batch_decode(plain)


def test_in_the_wild_assisted():
    """transformers' assisted generation under watch: silent and exact on the default pair's
    prompts; on the tiny Qwen3 prompt whose output holds the pad id, the page's C1 finding."""
    from _broken_helpers import WITH_PAD_ID, pair

    from batchspec.demo_pair import demo_pair
    from batchspec.invariants import watch

    page = "docs/in-the-wild.md"
    block = shown(page, "def assisted(prompt):")
    demo = demo_pair(3, torch.float64)
    namespace = run(block, {"torch": torch, "watch": watch, "target": demo.target, "draft": demo.draft,
                            "prompts": demo.prompts})
    assert namespace["w"].violations == [] and len(namespace["out"]) == 3
    target, draft = pair("qwen3")
    record = lambda **kw: watch(check="record", **kw)  # noqa: E731  the finding is reported, not raised
    namespace = run(block, {"torch": torch, "watch": record, "target": target, "draft": draft,
                            "prompts": [WITH_PAD_ID[3]]})
    violations = namespace["w"].violations
    assert {v.model for v in violations} == {"draft"}
    assert same_text(str(violations[0]), shown(page, "C1 one_chain violated at call #5, row 0, model 'draft':"))


def test_models_page(capsys, monkeypatch, tmp_path):
    """``batchspec models list`` runs; the Python block prints what its comment says on a
    machine where the real pair was never fetched (an empty cache folder)."""
    from batchspec.cli import main

    page = "docs/models.md"
    listing = shown(page, "$ batchspec models list")
    assert main(commands(listing)[0]) == 0 and "qwen2.5-coder" in capsys.readouterr().out
    monkeypatch.setenv("BATCHSPEC_CACHE", str(tmp_path))
    block = shown(page, "from batchspec.models.registry import availability, load_pair")
    namespace = run(block, {})
    comment = block.body.splitlines()[2].split("# ", 1)[1]
    expected = ".*".join(re.escape(part) for part in comment.split("..."))
    assert re.fullmatch(expected, capsys.readouterr().out.strip()), comment
    assert namespace["tokenizer"] is not None and namespace["target"].config.vocab_size == 256


def test_a_tutorial_executes_headless_as_the_page_says(tmp_path):
    """The jupytext command, from the repository root, its notebook written to a
    temporary folder instead of tutorials/: every cell runs, the pictures included."""
    import subprocess

    import nbformat

    block = shown("docs/tutorials/index.md", "jupytext --to ipynb --set-kernel python3 --execute "
                                             "tutorials/05_eqspec_step_by_step.py \\")
    argv = shlex.split(block.body.replace("\\\n", " "))
    out = argv.index("-o") + 1
    assert argv[0] == "jupytext" and argv[out] == "tutorials/05_executed.ipynb"
    argv[out] = str(tmp_path / "05_executed.ipynb")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = [o for cell in nbformat.read(argv[out], as_version=4).cells if cell.cell_type == "code"
               for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
