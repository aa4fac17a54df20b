"""The ``custom_generate`` path checked like any decoder: under
``batchspec.invariants.watch`` with no glue (Spec §3.9), on the conformance
vectors through ``batchspec conformance check``, and as a Hub-layout folder
loaded from the checkout with ``trust_remote_code=True``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from batchspec import hf
from batchspec.cli import main as cli
from batchspec.conformance import export
from batchspec.invariants import watch

FOLDER = Path(__file__).resolve().parents[2] / "batchspec" / "batchspec_generate"


def left_padded(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    return ids, (torch.arange(width) >= width - torch.tensor([len(p) for p in prompts])[:, None]).long()


def test_watch_stays_silent_on_the_custom_generate_path(pairs):
    target, draft = pairs("qwen3", "perturbed")
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14], [15, 16]]
    ids, mask = left_padded(prompts)
    with watch(target=target, draft=draft, check="record") as w:
        out = target.generate(input_ids=ids, attention_mask=mask, assistant_model=draft, custom_generate=hf.HUB,
                              trust_remote_code=True, max_new_tokens=10, eos_token_id=None)
        rows = out[:, ids.shape[1]:].tolist()
        w.outputs(prompts, rows, max_new_tokens=10)
    assert w.calls > 4 and w.violations == []
    with watch(target=target, draft=draft, check="record") as control:  # the same check fires on a wrong row
        target.generate(input_ids=ids, attention_mask=mask, custom_generate=hf.generate, draft=draft,
                        max_new_tokens=10, eos_token_id=None)
        control.outputs(prompts, [rows[0][:-1] + [(rows[0][-1] + 1) % 96]] + rows[1:], max_new_tokens=10)
    assert control.violations


@pytest.mark.slow
def test_the_conformance_vectors_pass_through_transformers_generate(tmp_path, capsys):
    names = export(tmp_path, families=("llama",), classes=())
    command = f"{sys.executable} {Path(__file__).parents[1] / '_hf_conformance_command.py'}"
    assert cli(["conformance", "check", str(tmp_path), "--command", command]) == 0
    out = capsys.readouterr().out
    assert all(f"PASS {name}" in out for name in names) and len(names) == 2


def test_the_folder_is_a_hub_custom_generate_repository():
    code = (FOLDER / "custom_generate" / "generate.py").read_text()
    imports = [n for n in ast.parse(code).body if not isinstance(n, ast.Expr)]  # the docstring aside
    assert len(imports) == 1 and imports[0].module == "batchspec.hf"  # a thin import of the package
    assert "batchspec" in (FOLDER / "custom_generate" / "requirements.txt").read_text().split()[0]
    card = (FOLDER / "README.md").read_text()
    assert card.startswith("---\n") and "custom_generate" in card.split("---")[1]
    assert "custom_generate=" in card and "trust_remote_code=True" in card


@pytest.mark.slow
def test_the_folder_runs_offline_from_the_checkout_and_only_when_trusted(pairs):
    script = (
        "import torch, transformers; from batchspec.models.tiny import pair; t, d = pair('llama')\n"
        "ids = torch.tensor([[0, 5, 6], [7, 8, 9]]); m = (ids != 0).long()\n"
        "want = t.generate(input_ids=ids, attention_mask=m, max_new_tokens=6)\n"
        f"got = t.generate(input_ids=ids, attention_mask=m, assistant_model=d, custom_generate={str(FOLDER)!r},\n"
        "                  trust_remote_code=True, max_new_tokens=6)\n"
        "assert torch.equal(got, want), (got, want); print('equal')\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "equal", run.stderr[-2000:]
    target, draft = pairs("llama", "perturbed")
    with pytest.raises(ValueError, match="trust_remote_code"):
        target.generate(input_ids=torch.tensor([[5, 6]]), assistant_model=draft, custom_generate=str(FOLDER),
                        max_new_tokens=2)


@pytest.mark.slow
def test_the_docs_page_and_the_readme_run_as_printed(capsys):
    root = FOLDER.parent.parent
    page = (root / "docs" / "from-transformers.md").read_text()
    first = page.split("```python\n")[1].split("```")[0]
    exec(compile(first, "docs/from-transformers.md", "exec"), {})
    printed = page.split("prints\n\n```text\n")[1].split("```")[0]
    assert capsys.readouterr().out == printed  # the refusal at batch 4, True, the texts
    readme = (root / "README.md").read_text()
    use_it = readme[readme.index("## Use it"):]
    exec(compile(use_it.split("```python\n")[1].split("```")[0], "README.md", "exec"), {})  # it asserts equality
