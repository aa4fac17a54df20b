"""Spec and code stay linked: ids exist, citations resolve, invariants have predicates and tests.

* every heading of a spec section file carries an id ``§n.m``, unique, and
  numbered inside its file's section (``§3.x`` in ``03-*.md``);
* every name a Python block defines is defined under exactly one heading;
* (that every ``Spec §x.y`` cited anywhere exists: ``test_citations.py``);
* every invariant of §3 (a heading ``§3.n In name``) has a predicate of the
  same name registered under the same id in ``invariants/registry.py``, and
  a test other than this file names that predicate; a reserved invariant
  heading may have neither yet, and the registry has no invariant the spec
  lacks;
* every registered decoding method names a spec section that exists, and a
  test other than this file runs it by name.

Both registration checks are shown failing on a synthetic registration.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from _spec_helpers import ROOT, python_blocks, spec_files

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
SECTION_ID = re.compile(r"^§(\d+(?:\.\d+)*)\s+\S")
INVARIANT_HEADING = re.compile(r"^§3\.\d+\s+(I\d+)\b")


def headings() -> list[tuple[Path, int, str]]:
    """``(file, line, text)`` of every heading outside fenced code."""
    out = []
    for path in spec_files():
        fenced = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
            match = None if fenced else HEADING.match(line)
            if match:
                out.append((path, number, match.group(2).strip()))
    return out


def section_ids() -> dict[str, tuple[Path, int, str]]:
    return {SECTION_ID.match(text).group(1): (path, line, text)
            for path, line, text in headings() if SECTION_ID.match(text)}


def test_every_heading_has_a_unique_id_in_its_section():
    seen: dict[str, str] = {}
    problems = []
    for path, line, text in headings():
        match = SECTION_ID.match(text)
        if not match:
            problems.append(f"{path.name}:{line}: heading without a §id: {text!r}")
            continue
        section = match.group(1)
        if section.split(".")[0] != str(int(path.name[:2])):
            problems.append(f"{path.name}:{line}: §{section} outside its file's section")
        if section in seen:
            problems.append(f"{path.name}:{line}: §{section} also at {seen[section]}")
        seen[section] = f"{path.name}:{line}"
    assert not problems, "\n".join(problems)
    assert {"1", "2", "3", "4", "5", "6", "7"} <= set(seen)


def test_every_definition_lives_under_one_heading():
    where: dict[str, str] = {}
    problems = []
    for path in spec_files():
        lines = path.read_text().splitlines()
        for start, source in python_blocks(path):
            heading = next((SECTION_ID.match(HEADING.match(l).group(2)).group(1)
                            for l in reversed(lines[: start - 1]) if HEADING.match(l)), None)
            if heading is None:
                problems.append(f"{path.name}:{start}: block before any heading")
                continue
            for node in ast.parse(source).body:
                names = []
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                for name in names:
                    if name in where and where[name] != heading:
                        problems.append(f"{name} defined in §{where[name]} and again in §{heading}")
                    where[name] = heading
    assert not problems, "\n".join(problems)
    assert len(where) >= 30


def spec_invariants() -> dict[str, str | None]:
    """Invariant id -> its predicate's name in the spec (None: reserved, no block)."""
    out = {}
    for path in spec_files():
        lines = path.read_text().splitlines()
        blocks = python_blocks(path)
        for _, line, text in [h for h in headings() if h[0] == path]:
            match = INVARIANT_HEADING.match(text)
            if not match:
                continue
            following = [h[1] for h in headings() if h[0] == path and h[1] > line]
            end = min(following, default=len(lines) + 1)
            names = [node.name for start, source in blocks if line < start < end
                     for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
            out[match.group(1)] = names[0] if names else None
    return out


def other_test_files() -> dict[str, str]:
    """Every test module but this one, by name: where a registration must find its test."""
    return {p.name: p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name}


def invariant_problems(registry: dict[str, str], invariants: dict[str, str | None],
                       tests: dict[str, str]) -> list[str]:
    """What is missing for each registered invariant (id -> predicate name): its spec
    section (a heading ``§3.n In``, whose block defines the same predicate) and a test
    that names the predicate (Contributing §5.1)."""
    stated = {i: name for i, name in invariants.items() if name is not None}
    problems = [f"{i}: the spec's predicate {name!r}, the registry's {registry.get(i)!r}"
                for i, name in stated.items() if registry.get(i) != name]
    problems += [f"{i}: registered, not in spec §3" for i in registry if i not in invariants]
    for i, name in registry.items():
        if not any(re.search(rf"\b{name}\b", text) for text in tests.values()):
            problems.append(f"{i}: no test names {name}")
    return problems


def test_every_invariant_has_a_predicate_and_a_test():
    from batchspec.invariants import INVARIANTS

    invariants = spec_invariants()
    assert {"I1", "I2", "I3", "I4"} <= set(invariants)
    problems = invariant_problems({i: p.__name__ for i, p in INVARIANTS}, invariants, other_test_files())
    assert not problems, "\n".join(problems)


def test_an_invariant_registered_without_its_section_or_test_fails():
    from batchspec.invariants import INVARIANTS

    registry = {i: p.__name__ for i, p in INVARIANTS}
    invariants, tests = spec_invariants(), other_test_files()
    assert invariant_problems({**registry, "I9": "made_up_invariant"}, invariants, tests) == [
        "I9: registered, not in spec §3", "I9: no test names made_up_invariant"]
    with_section = {**invariants, "I9": "made_up_invariant"}  # a section, still no test
    assert invariant_problems({**registry, "I9": "made_up_invariant"}, with_section, tests) == [
        "I9: no test names made_up_invariant"]


def method_problems(methods: dict[str, str], sections: set[str], tests: dict[str, str]) -> list[str]:
    """What is missing for each registered method (name -> its ``Method.section``): a
    section that spec/ has, and a test that runs the method by name (Contributing §5.2)."""
    problems = [f"{name}: section {section!r} is not a heading of spec/"
                for name, section in methods.items() if section not in sections]
    for name in methods:
        if not any(re.search(rf"""["']{re.escape(name)}["']""", text) for text in tests.values()):
            problems.append(f"{name}: no test names the method {name!r}")
    return problems


def test_every_method_has_a_section_and_a_test():
    from batchspec import METHODS

    methods = {name: method.section for name, method in METHODS.items()}
    assert {"eqspec", "autoregressive", "exspec", "masking", "rollback", "dsd"} <= set(methods)
    problems = method_problems(methods, set(section_ids()), other_test_files())
    assert not problems, "\n".join(problems)


def test_a_method_registered_without_its_section_or_test_fails():
    from batchspec import METHODS

    methods = {name: method.section for name, method in METHODS.items()}
    sections, tests = set(section_ids()), other_test_files()
    assert method_problems({**methods, "made_up": ""}, sections, tests) == [
        "made_up: section '' is not a heading of spec/", "made_up: no test names the method 'made_up'"]
    assert method_problems({**methods, "made_up": "4.8"}, sections, {**tests, "test_x.py": 'method="made_up"'}) == []
