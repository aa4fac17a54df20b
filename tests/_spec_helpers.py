"""Helpers shared by the spec tests and the exhaustive check (not collected by pytest)."""

from __future__ import annotations

import contextlib
import re
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"

#: Prompts of the exhaustive check and the refinement test: ragged lengths,
#: one of a single token (its row has no cached slot after prefill).
PROMPTS = [[17, 33, 50, 8, 71], [42], [9, 64, 27]]


@contextlib.contextmanager
def one_thread():
    """Tiny models run fastest on one thread; restore the setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@torch.no_grad()
def greedy_continuation(target, prompt: list[int], n: int) -> list[int]:
    """The target's batch-1 greedy continuation: ``n`` argmax steps, each a fresh
    forward of the whole prefix at positions ``0 .. len-1`` (no cache, no padding)."""
    tokens = list(prompt)
    for _ in range(n):
        ids = torch.tensor([tokens], dtype=torch.long, device=target.device)
        logits = target(input_ids=ids, position_ids=torch.arange(len(tokens))[None, :]).logits
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt):]


def cut(tokens: list[int], eos: set[int], budget: int) -> list[int]:
    """``tokens`` cut after the first EOS and at ``budget`` tokens."""
    out = []
    for t in tokens[:budget]:
        out.append(t)
        if t in eos:
            break
    return out


def spec_files() -> list[Path]:
    """The spec's Markdown sections, in order."""
    return sorted(p for p in SPEC.glob("*.md") if re.match(r"\d\d-", p.name))


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(line, source)`` of every fenced ``python`` block of ``path``."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if current is None and line.strip() == "```python":
            current, start = [], number + 1
        elif current is not None and line.strip() == "```":
            blocks.append((start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def spec_namespace() -> dict:
    """Execute every Python block of the spec, in order, in one namespace."""
    module = types.ModuleType("batchspec_spec")  # registered: dataclasses look their module up
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    for path in spec_files():
        for line, source in python_blocks(path):
            code = compile("\n" * (line - 1) + source, str(path), "exec")
            exec(code, namespace)  # noqa: S102 - the spec is ours
    return namespace
