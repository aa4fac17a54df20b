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

* every field of a dataclass the spec defines has a field (or attribute) of
  the same name in the code's class of that name, or is listed below with
  its counterpart and reason; a spec alias (``Event = Observation``) lends
  its class the alias's code class too;
* a tutorial that prints a spec symbol with a value (``a_i = {...}``) prints
  the code name the notation table gives that symbol, not another word.

Every checker is shown to fire, on a synthetic spec block, table, dataclass
or tutorial line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re

from _spec_helpers import ROOT, SPEC, python_blocks, spec_files

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
    "violated_in_run", "record_choices", "attended_rows", "correct_calls",
    # §8.5's statement for one run, a theorem like those of §5
    "exspec_exact",
}

#: Spec dataclass fields whose code counterpart has another name or shape, and why.
FIELD_COUNTERPARTS = {
    # one attribute per model: target_cache, draft_cache (StackedCache), where the spec keeps a dict
    ("BatchState", "caches"): "batchspec.reference.state.BatchState.target_cache",
    # the code's Event holds the batch as `state`; the code's Observation spreads it into
    # tokens, mask, pad, length, caches, requests, round (Spec §3.9's table)
    ("Observation", "batch"): "batchspec.reference.eqspec.Event.state",
    # the code's Ledger keeps the written fingerprints per model in tables of tensors
    ("Ledger", "written"): "batchspec.invariants.ledger.Ledger.tables",
    # the code's Speculation keeps the round (k', drafts) and the verdict (m_i, proposals) whole
    ("Speculation", "drafted"): "batchspec.reference.transitions.Round.k",
    ("Speculation", "accepted"): "batchspec.reference.acceptance.Verdict.accepted_drafts",
    ("Speculation", "proposals"): "batchspec.reference.acceptance.Verdict.proposal",
    # a member's state is its tokens and its batch-1 caches, kept apart
    ("Member", "state"): "batchspec.reference.exspec_pool.Member.tokens",
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


def spec_dataclasses(blocks) -> tuple[dict[str, tuple[str, list[str]]], dict[str, str]]:
    """``(class name -> (where, annotated fields), alias -> class)`` of ``blocks``."""
    out, aliases = {}, {}
    for name, line, source in blocks:
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)]
                out.setdefault(node.name, (f"{name}:{line + node.lineno - 1}", fields))
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and len(node.targets) == 1:
                aliases[node.targets[0].id] = node.value.id
    return out, aliases


def attributes(cls: type) -> set[str]:
    """What an instance of ``cls`` has: fields, annotations, class attributes, and the
    ``self.name`` its methods assign."""
    names = set(dir(cls)) | {n for c in cls.__mro__ for n in getattr(c, "__annotations__", {})}
    try:
        tree = ast.parse(inspect.getsource(cls).strip())
    except (OSError, TypeError, SyntaxError):
        return names
    return names | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name) and n.value.id == "self" and isinstance(n.ctx, ast.Store)}


def field_problems(dataclasses_: dict, aliases: dict[str, str], known: dict[str, list[type]]) -> list[str]:
    """Spec dataclass fields that the code's class of that name (or of an alias's
    name) lacks, unless listed in FIELD_COUNTERPARTS."""
    problems = []
    for name, (where, fields) in dataclasses_.items():
        names = {name} | {alias for alias, target in aliases.items() if target == name}
        code = [c for n in names for c in known.get(n, [])]
        if not code:
            continue  # no namesake: the class checks above report it
        have = set().union(*(attributes(c) for c in code))
        problems += [f"{where}: {name}.{f} has no field {f!r} in {', '.join(sorted(names))} of the code"
                     for f in fields if f not in have and (name, f) not in FIELD_COUNTERPARTS]
    return problems


def test_every_field_of_a_spec_dataclass_has_its_namesake():
    blocks = [(p.name, line, source) for p in spec_files() for line, source in python_blocks(p)]
    found, aliases = spec_dataclasses(blocks)
    assert {"BatchState", "ForwardCall", "Observation"} <= set(found) and aliases.get("Event") == "Observation"
    assert field_problems(found, aliases, classes(code_modules())) == []


def test_the_listed_field_counterparts_exist_and_are_needed():
    blocks = [(p.name, line, source) for p in spec_files() for line, source in python_blocks(p)]
    found, aliases = spec_dataclasses(blocks)
    known = classes(code_modules())
    for (name, f), target in FIELD_COUNTERPARTS.items():
        assert f in found[name][1], (name, f)
        assert f not in set().union(*(attributes(c) for c in known[name])), f"{name}.{f} has a namesake now"
        owner, _, attribute = target.rpartition(".")
        module, _, cls = owner.rpartition(".")
        assert attribute in attributes(getattr(importlib.import_module(module), cls)), target


def test_the_field_checker_fires_on_a_renamed_field():
    """The spec's ForwardCall had fields (inputs, mask, positions, outputs) that the
    code calls input_ids, attention_mask, position_ids, logits: such a block fails."""
    block = [("99-synthetic.md", 3, "@dataclass\nclass ForwardCall:\n    model: str\n    inputs: list\n"
                                     "    outputs: list = None\n\n\nclass Made:\n    up: int\n")]
    found, aliases = spec_dataclasses(block)
    assert field_problems(found, aliases, classes(code_modules())) == [
        "99-synthetic.md:4: ForwardCall.inputs has no field 'inputs' in ForwardCall of the code",
        "99-synthetic.md:4: ForwardCall.outputs has no field 'outputs' in ForwardCall of the code",
    ]


SYMBOL_CELL = re.compile(r"\$([^$]+)\$")
PRINTED = re.compile(r"""(?<![\w'])([A-Za-zδ](?:_i)?'?(?:_i)?)\s*=\s*(?:\{([^}]*)\}|["'],\s*([\w.\[\]'"]+))""")


def symbol_names(text: str) -> dict[str, set[str]]:
    """Symbol as printed (``a_i``, ``p'_i``, ``δ_i``) -> the code names the notation
    table's row gives it (the last part of each dotted name, and bare names)."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not SYMBOL_CELL.search(cells[0]):
            continue
        names = {n.split("[")[0].split(".")[-1] for n in re.findall(r"`([^`]+)`", cells[-1])}
        for symbol in SYMBOL_CELL.findall(cells[0]):
            out[symbol.replace("\\delta", "δ").replace(" ", "")] = names
    return out


def printed_problems(name: str, text: str, symbols: dict[str, set[str]]) -> list[str]:
    """Printed ``symbol = value`` whose value's name is not the symbol's code name."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for symbol, braced, argument in PRINTED.findall(line):
            if symbol not in symbols:
                continue
            expression = re.split(r"[:!]", braced)[0] if braced else argument
            last = re.findall(r"\[['\"](\w+)['\"]\]|\.(\w+)|^(\w+)", expression.strip())
            word = next(filter(None, last[-1])) if last else expression
            letters = symbol.split("_")[0].rstrip("'").replace("δ", "delta")
            allowed = symbols[symbol] | {letters}
            if not any(word == a or word.endswith("_" + a) for a in allowed):
                problems.append(f"{name}:{number}: prints {symbol} from {word!r}, "
                                f"which the notation table calls {' or '.join(sorted(symbols[symbol]))}")
    return problems


def test_tutorials_print_a_spec_symbol_under_its_code_name():
    symbols = symbol_names((SPEC / "01-notation.md").read_text())
    assert {"a_i", "m_i", "p_i", "δ_i", "L'"} <= set(symbols)
    problems, printed = [], 0
    for path in sorted((ROOT / "tutorials").glob("[0-9]*.py")):
        text = path.read_text()
        printed += sum(1 for line in text.splitlines() for s, *_ in PRINTED.findall(line) if s in symbols)
        problems += printed_problems(path.name, text, symbols)
    assert printed >= 5  # the tutorials print symbols; an empty scan passes anything
    assert problems == []


def test_the_printed_symbol_checker_fires():
    """Tutorial 5 once printed the counts a_i from a key named 'committed' (the tokens)."""
    symbols = symbol_names((SPEC / "01-notation.md").read_text())
    planted = "print(f\"round {r}: m_i = {ragged['accepted']}, a_i = {ragged['committed']}\")\n"
    assert printed_problems("05.py", planted, symbols) == [
        "05.py:1: prints a_i from 'committed', which the notation table calls a or appended or eqspec_round"]
    assert printed_problems("01.py", 'print("accepted drafts per row, m_i =", m)\n', symbols) == []
    assert printed_problems("01.py", 'print("m_i =", rejected)\n', symbols) != []
