"""The layering rules of CONTRIBUTING.md (Contributing §3), read from the imports.

* ``invariants/`` imports nothing of the package outside itself: not
  ``reference/`` (a checker that imported the code it checks could agree with it
  by construction), nor ``batchspec``'s other modules, which import ``reference/``;
* ``reference/`` imports only itself and ``invariants/``, never times and never
  prints: no ``time``/``timeit``/``logging`` import, no ``print`` call
  (Contributing §4.7). Timing and output belong to ``batchspec``'s driver,
  benchmarks and CLI;
* ``benchmarks/`` loads pairs and prompts through the public
  ``batchspec.models`` API, never through the command line's modules
  (``batchspec.cli``), which are free to change with the commands.

The rules are checked on the parsed source, so a comment or a docstring that
names a module is no import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())

#: folder -> the packages (under batchspec) its modules may import
ALLOWED = {"invariants": ("batchspec.invariants",),
           "reference": ("batchspec.reference", "batchspec.invariants")}
TIMING = {"time", "timeit", "logging"}


def imported(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``tree``, relative ones resolved
    against ``module`` (the importing module's dotted name)."""
    out = []
    package = module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            out.append((node.lineno, name))
    return out


def problems(folder: str, module: str, source: str) -> list[str]:
    """What breaks the layering rules in one module of ``folder`` (``invariants`` or
    ``reference``), named ``module`` (``batchspec.reference.transitions``)."""
    tree = ast.parse(source)
    out = []
    for line, name in imported(tree, module):
        inside = name == "batchspec" or name.startswith(("batchspec.", "reference", "invariants"))
        if inside and not name.startswith(ALLOWED[folder]):
            out.append(f"{module}:{line}: imports {name}")
        if folder == "reference" and name.split(".")[0] in TIMING:
            out.append(f"{module}:{line}: imports {name} (reference/ never times)")
    if folder == "reference":
        out += [f"{module}:{node.lineno}: calls print (reference/ never prints)" for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]
    return out


def modules(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = path.relative_to(ROOT / folder).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        yield ".".join(("batchspec", folder, *parts)) + (".__init__" if path.stem == "__init__" else ""), path


def test_the_layers_keep_their_rules():
    found = []
    for folder in ALLOWED:
        paths = list(modules(folder))
        assert len(paths) > 10, folder  # an empty scan would pass anything
        for module, path in paths:
            found += problems(folder, module, path.read_text())
    assert not found, "\n".join(found)


def cli_imports(module: str, source: str) -> list[str]:
    """The imports of ``batchspec.cli`` in a benchmark script."""
    return [f"{module}:{line}: imports {name}" for line, name in imported(ast.parse(source), module)
            if name == "batchspec.cli" or name.startswith("batchspec.cli.")]


def test_benchmarks_use_the_public_models_api():
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 3
    found = [p for path in scripts for p in cli_imports(path.name, path.read_text())]
    assert not found, "\n".join(found)
    assert cli_imports("planted.py", "from batchspec.cli.pairs import PAIRS\nfrom batchspec.models import registry\n") \
        == ["planted.py:1: imports batchspec.cli.pairs"]


def test_the_rules_fire_on_planted_imports_timing_and_printing():
    """Each rule, shown firing on a synthetic module that breaks it."""
    assert problems("invariants", "batchspec.invariants.made_up", "from ..reference import transitions\n") == [
        "batchspec.invariants.made_up:1: imports batchspec.reference"]
    assert problems("invariants", "batchspec.invariants.made_up", "import batchspec.api\n") == [
        "batchspec.invariants.made_up:1: imports batchspec.api"]
    assert problems("invariants", "batchspec.invariants.made_up", "from ..driver import clocked\n") == [
        "batchspec.invariants.made_up:1: imports batchspec.driver"]
    planted = "import time\nfrom ...stats import Stats\n\ndef f():\n    print(time.time())\n"
    assert problems("reference", "batchspec.reference.baselines.made_up", planted) == [
        "batchspec.reference.baselines.made_up:1: imports time (reference/ never times)",
        "batchspec.reference.baselines.made_up:2: imports batchspec.stats",
        "batchspec.reference.baselines.made_up:5: calls print (reference/ never prints)",
    ]
    # what the rules allow: the layer's own modules, invariants/ from reference/, third parties
    allowed = "import torch\nfrom .state import Batch\nfrom ..invariants.memo import Memo\n"
    assert problems("reference", "batchspec.reference.transitions", allowed) == []
    assert problems("invariants", "batchspec.invariants.cache", "from .memo import Memo\n") == []
