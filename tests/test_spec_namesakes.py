"""One hop from the spec to the code (Contributing §4.6): names, checked.

* every function or class a Python block of the spec defines at top level
  has a namesake in ``reference/`` or ``invariants/``: a function, a class,
  or a member of a class (a method, a property, a hook field) of the same
  name. The blocks of §5–§7 state theorems and counterexamples and define no
  operation, so they are not asked for one; the few definitions that have
  no namesake are listed below, each with its reason;
* every dotted code name in the notation tables (``spec/01-notation.md``)
  names something importable: a module, then attributes of it, or a class
  of ``reference/`` / ``invariants/`` and its members (``BatchState.pad``);
  every file they name exists; and no code name of the symbol table stands
  in two rows, for two symbols.

Both checkers are shown to fire, on a synthetic spec block and table.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: helpers by path
from _spec_helpers import ROOT, SPEC, python_blocks, spec_files  # noqa: E402

#: Spec files whose blocks state properties rather than define operations:
#: the theorems (§5), the alternatives' counterexamples (§6), the non-invariants (§7).
STATEMENTS = ("05-theorems.md", "06-alternatives.md", "07-non-invariants.md")

#: Spec definitions whose code counterpart cannot carry the spec's name, the
#: counterpart (checked to exist) and why. The spec's blocks share one namespace,
#: and the code's names are held by other things.
COUNTERPARTS = {
    # `positions` names the position tensors of every call in the code; the function derives them from p_i
    "positions": "batchspec.reference.state.content_index",
    # decides every row at once, and is the hook `Steps.commit_counts`
    "commit_count": "batchspec.reference.acceptance.commit_counts",
    # `decode` is EQSPEC's in the spec's one namespace (§4.8); the code has a module per method
    "exspec_decode": "batchspec.reference.exspec.decode",
    # the scheduler's round, a transaction, with each request's own cut (§8.6)
    "transactional_step": "batchspec.scheduler.Scheduler.step",
    "cut": "batchspec.scheduler.Scheduler.step",
}

#: Definitions of the spec's abstract model with no code counterpart by design.
MODEL_ONLY = {
    # the abstract slot record (§2.3); the code's slots hold keys and values, compared by I3 and I6
    "kv", "committed_cache",
    # the abstract checker's bookkeeping over a run (§3.6, §3.11, §3.12); the code's
    # checker keeps it in Ledger and History objects, fed by `violations` and `watch`
    "record_writes", "violated_in_run", "record_choices", "attended_rows", "correct_calls",
    # §8.5's statement for one run, a theorem like those of §5
    "exspec_exact",
}

PACKAGES = ("batchspec.reference", "batchspec.invariants")
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\[[^`\]]*\])?`")  # `a.b`, `a.b[i]`
FILE = re.compile(r"`((?:reference|invariants|batchspec)/[\w/]+\.py)`")


def spec_definitions(blocks) -> dict[str, str]:
    """Top-level function and class names of ``blocks`` (``(file name, line, source)``) -> where."""
    out = {}
    for name, line, source in blocks:
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                out.setdefault(node.name, f"{name}:{line + node.lineno - 1}")
    return out


def code_modules() -> list:
    """Every module of ``reference/`` and ``invariants/``, imported."""
    modules = []
    for package in map(importlib.import_module, PACKAGES):
        modules.append(package)
        found = pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        modules += [importlib.import_module(m.name) for m in found]
    return modules


def code_names(modules) -> set[str]:
    """Functions and classes these modules define, and their classes' function
    members: methods, properties, and hooks (``Steps.accept``, a field whose
    default is a function)."""
    names = set()
    for module in modules:
        for name, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__:
                names.add(name)
            if inspect.isclass(value) and value.__module__ == module.__name__:
                names |= {n for n, v in vars(value).items()
                          if inspect.isfunction(v) or isinstance(v, (property, classmethod, staticmethod))}
    return names


def missing_namesakes(definitions: dict[str, str], names: set[str]) -> list[str]:
    """Spec definitions with no namesake and no listed reason."""
    return [f"{where}: {name}" for name, where in definitions.items()
            if name not in names and name not in COUNTERPARTS and name not in MODEL_ONLY]


def classes(modules) -> dict[str, list[type]]:
    """Class name -> the classes of that name the modules define."""
    out: dict[str, list[type]] = {}
    for module in modules:
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                out.setdefault(name, []).append(value)
    return out


def member(owner, name: str):
    """``(found, value)``: attribute ``name`` of a module or class; a
    dataclass field or an annotation without a class value is found as ``None``
    (a value: what lies below it is not checked)."""
    if inspect.ismodule(owner):
        full = f"{owner.__name__}.{name}"
        if hasattr(owner, "__path__") and importlib.util.find_spec(full) is not None:
            return True, importlib.import_module(full)
        return hasattr(owner, name), getattr(owner, name, None)
    if hasattr(owner, name):
        return True, getattr(owner, name)
    annotated = any(name in getattr(c, "__annotations__", {}) for c in owner.__mro__)
    return annotated, None


def head(name: str, known: dict[str, list[type]]):
    """What the first part of a dotted name is: a package, a module of one
    of the packages, or a class of ``reference/`` / ``invariants/``."""
    if name == "batchspec":
        return [importlib.import_module("batchspec")]
    if name in ("reference", "invariants"):
        return [importlib.import_module(f"batchspec.{name}")]
    found = [importlib.import_module(f"{p}.{name}") for p in (*PACKAGES, "batchspec")
             if importlib.util.find_spec(f"{p}.{name}") is not None]
    return found + known.get(name, [])


def unresolved(dotted: str, known: dict[str, list[type]]) -> str | None:
    """Why ``dotted`` names nothing, or None when it names one thing."""
    first, *rest = dotted.split(".")
    owners = head(first, known)
    if len(owners) != 1:
        return f"{first!r} is {'ambiguous' if owners else 'no module or class'}"
    owner = owners[0]
    for part in rest:
        if owner is None:  # below a field: a value, not checked
            return None
        found, owner = member(owner, part)
        if not found:
            return f"no {part!r}"
    return None


def notation_rows(text: str) -> list[tuple[int, str, str]]:
    """``(line, table header's first cell, row's last cell)`` of every body row of
    the page's tables (a header is the row above a ``| --- |`` line)."""
    lines, rows, header = text.splitlines(), [], None
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        if number < len(lines) and lines[number].startswith("| ---"):
            header = cells[0]
            continue
        rows.append((number, header, cells[-1]))
    return rows


def notation_problems(text: str, known: dict[str, list[type]]) -> list[str]:
    """Code names of the tables that name nothing, files that are not there,
    and code names that stand for two symbols."""
    problems, seen = [], {}
    for line, header, code in notation_rows(text):
        for dotted in DOTTED.findall(code):
            why = unresolved(dotted, known)
            if why:
                problems.append(f"01-notation.md:{line}: `{dotted}` names nothing ({why})")
            if header == "Symbol" and seen.setdefault(dotted, line) != line:
                problems.append(f"01-notation.md:{line}: `{dotted}` also stands for another symbol, "
                                f"line {seen[dotted]}")
        problems += [f"01-notation.md:{line}: no file `{path}`" for path in FILE.findall(code)
                     if not (ROOT / path).is_file()]
    return problems


def test_every_spec_definition_has_its_namesake_in_the_code():
    blocks = [(p.name, line, source) for p in spec_files() if p.name not in STATEMENTS
              for line, source in python_blocks(p)]
    definitions = spec_definitions(blocks)
    assert len(definitions) > 40
    assert missing_namesakes(definitions, code_names(code_modules())) == []


def test_the_listed_exceptions_are_spec_definitions_and_counterparts_exist():
    """The lists stay honest: every name is defined by the spec, none has a
    namesake after all, and every counterpart named exists."""
    definitions = spec_definitions([(p.name, line, source) for p in spec_files() for line, source in python_blocks(p)])
    modules = code_modules()
    names = code_names(modules)
    for name in (*COUNTERPARTS, *MODEL_ONLY):
        assert name in definitions, name
        assert name not in names, f"{name} has a namesake now: drop it from the list"
    known = classes(modules)
    assert {target: unresolved(target, known) for target in COUNTERPARTS.values()} == \
        {target: None for target in COUNTERPARTS.values()}


def test_every_code_name_in_the_notation_tables_names_one_thing():
    text = (SPEC / "01-notation.md").read_text()
    assert len(DOTTED.findall(text)) > 40
    assert notation_problems(text, classes(code_modules())) == []


def test_the_checkers_fire():
    """A spec block defining a function the code lacks is reported, and so are
    table entries that name nothing, a missing attribute, or one name for two symbols."""
    modules = code_modules()
    block = [("99-synthetic.md", 3, "def realign(cache):\n    pass\n\n\ndef unheard_of_move(cache):\n    pass\n")]
    assert missing_namesakes(spec_definitions(block), code_names(modules)) == ["99-synthetic.md:7: unheard_of_move"]
    table = ("| Symbol | Meaning | Code |\n| --- | --- | --- |\n"
             "| $p_i$ | padding | `BatchState.pad[i]` |\n"
             "| $x$ | gone | `state.no_such_function` |\n"
             "| $y$ | a module that is not there | `vanished.thing`, `reference/vanished.py` |\n"
             "| $a_i$ | committed | `BatchState.pad` |\n")
    problems = notation_problems(table, classes(modules))
    assert [p.split(":")[1] for p in problems] == ["4", "5", "5", "6"], problems
    assert "no 'no_such_function'" in problems[0] and "no module or class" in problems[1]
    assert "no file `reference/vanished.py`" in problems[2]
    assert "also stands for another symbol, line 3" in problems[3]
    assert notation_problems(table.replace("| Symbol |", "| Spec |"), classes(modules))[3:] == []  # only symbols
