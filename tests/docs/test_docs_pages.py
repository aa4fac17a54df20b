"""The hand-written site pages say what the code does: the quickstart's code runs as printed.

Its blocks run in one namespace, in order, as a reader pasting them would
(the default pair in float64, three prompts, 24 new tokens: a few seconds).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
TEXT_BLOCK = re.compile(r"prints\n\n```text\n(.*?)```", re.S)
INLINE_PRINT = re.compile(r"prints `([^`]+)`")


def test_quickstart_runs_as_printed(capsys):
    blocks = PYTHON_BLOCK.findall((ROOT / "docs" / "quickstart.md").read_text())
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/quickstart.md", "exec"), namespace)  # the second block asserts exactness
    printed = capsys.readouterr().out.splitlines()
    page = (ROOT / "docs" / "quickstart.md").read_text()
    # float64 on CPU: the page shows the exact output, and this keeps it so
    assert printed[:3] == TEXT_BLOCK.findall(page)[0].splitlines()
    assert printed[3:] == INLINE_PRINT.findall(page)
    assert namespace["stats"].tokens_per_target_call > 1  # speculation did something


def test_step_through_page_claims_hold_on_the_traces_it_shows(docs_site):
    """What 'Step through a batch' tells the reader to watch, checked on the traces the build recorded."""
    import torch

    import batchspec
    from batchspec.models.default_pair import load_default_pair
    from batchspec.trace import Trace

    eqspec, masking = (Trace.load(docs_site / "step-through" / f"{name}.jsonl") for name in ("eqspec", "masking"))
    assert eqspec.header["prompts"] == masking.header["prompts"]  # the same four prompts
    # 1-2. the runs agree up to round 1's verify, and that round turns the batch ragged
    upto = eqspec.find(1, "verify")["index"] + 1  # prefill, round 1's drafts, its verify
    assert masking.steps[upto - 1]["step"] == "verify"
    for mine, theirs in zip(eqspec.steps[:upto], masking.steps[:upto]):
        assert (mine["step"], mine["observation"]["tokens"], mine["observation"]["draft_tokens"]) == \
               (theirs["step"], theirs["observation"]["tokens"], theirs["observation"]["draft_tokens"])
    assert len(set(eqspec.find(1, "realign")["decision"]["appended"])) > 1
    # 1. ...but not the same caches: masking's prefill feeds both models, EQSPEC's feeds nothing
    assert [c["model"] for c in masking.steps[0]["observation"]["calls"]] == ["target", "draft"]
    assert eqspec.steps[0]["observation"]["calls"] == []
    assert {c["length"] for c in eqspec.steps[0]["observation"]["caches"].values()} == {0}
    # 3. masking breaks I1 at that realign step; EQSPEC repads (some δ_i != 0) and breaks nothing
    first = masking.first_violation()
    assert (first["invariant"], first["round"], first["step"]) == ("I1", 1, "realign")
    assert any(eqspec.find(1, "realign")["decision"]["delta"]) and eqspec.violations == []
    # 4. masking feeds wrong positions in round 2 and drifts; EQSPEC equals the target alone
    assert any(v["invariant"] == "I2" for s in masking.round_steps(2) for v in s["violations"])
    target, _ = load_default_pair(torch.float64)
    settings = eqspec.header["settings"]
    alone = batchspec.generate(target, None, eqspec.header["prompts"], method="autoregressive",
                               max_new_tokens=settings["max_new_tokens"])
    assert eqspec.result["sequences"] == alone.sequences != masking.result["sequences"]


def test_the_readme_links_the_quickstart_in_the_repository_and_the_home_page_on_the_site(docs_site):
    """README.md links docs/quickstart.md; the home page, a page of its own, links the site's page."""
    readme = (ROOT / "README.md").read_text()
    assert "[Quickstart](docs/quickstart.md)" in readme and (ROOT / "docs" / "quickstart.md").is_file()
    home = (docs_site / "index.html").read_text()
    assert 'href="quickstart/">Quickstart</a>' in home and "docs/quickstart.md" not in home


READING_PATH = ["tutorials/01_the_ragged_problem/", "tutorials/02_masking_breaks_i1_and_i2/",
                "tutorials/05_eqspec_step_by_step/", "tutorials/06_exspec/",
                "tutorials/09_check_your_own_decoder/", "step-through/"]


def test_the_home_page_shows_the_picture_the_reading_path_and_the_two_commands(docs_site):
    home = (docs_site / "index.html").read_text()
    picture = (docs_site / "assets" / "home-methods.svg").read_text()
    assert 'src="assets/home-methods.svg"' in home
    for method in ("Masking", "Rollback", "DSD-style padding", "EQSPEC", "EXSPEC"):
        assert f">{method}" in picture and method in home
    path = home[home.index('id="read-in-this-order"'):home.index('id="two-commands"')]
    links = re.findall(r'<li><a href="([^"]+)">', path)
    assert links == READING_PATH
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "index.md").read_text(), re.S)
    assert len(commands) == 2 and all(c in readme for c in commands)  # the README's two commands
