"""Every public field of a class on the API pages has a sentence.

The classes are the ones ``docs/api/batchspec.md`` and ``docs/api/scheduler.md``
render (read from their ``:::`` directives); a field is a dataclass field or an
attribute ``__init__`` sets on ``self``. Its sentence is its entry in the class
docstring's Google-style ``Attributes:`` (or ``Args:``) section, parsed as
mkdocstrings parses it, and must run to at least four words.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("batchspec", "scheduler")
MIN_WORDS = 4
DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:[ \t]+.*\n|\n(?=[ \t]))*)", re.M)


def _resolve(dotted: str):
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    module, rest = dotted, []
    while True:
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError:
            module, _, last = module.rpartition(".")
            rest.insert(0, last)
    for name in rest:
        obj = getattr(obj, name)
    return obj


def page_classes(page: str) -> list[type]:
    """The classes a page's ``:::`` directives render: named, listed in ``members``, or defined in a named module."""
    found = []
    for dotted, options in DIRECTIVE.findall((ROOT / "docs" / "api" / f"{page}.md").read_text()):
        obj = _resolve(dotted)
        listed = re.findall(r"^\s+- (\w+)\s*$", options, re.M)
        if not inspect.ismodule(obj):
            members = [obj]
        elif listed:
            members = [getattr(obj, n) for n in listed]
        else:  # what the module defines, as mkdocstrings lists it
            members = [c for n, c in vars(obj).items()
                       if not n.startswith("_") and getattr(c, "__module__", None) == obj.__name__]
        found += [c for c in members if inspect.isclass(c) and c not in found]
    return found


def public_fields(cls: type) -> list[str]:
    """Dataclass fields, else the attributes ``__init__`` assigns to ``self``; ``_private`` ones left out."""
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    elif "__init__" in vars(cls):
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
        assigned = [t for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets]
        assigned += [node.target for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)]
        unpacked = [e for t in assigned for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        names = list(dict.fromkeys(e.attr for e in unpacked if isinstance(e, ast.Attribute)
                                   and isinstance(e.value, ast.Name) and e.value.id == "self"))
    else:
        names = []
    return [n for n in names if not n.startswith("_")]


def field_docs(cls: type) -> dict[str, str]:
    """``{name: description}`` from the docstring's ``Attributes:`` and ``Args:`` sections, as griffe reads them."""
    sections = griffe.Docstring(inspect.cleandoc(cls.__doc__ or "")).parse("google")
    kinds = (griffe.DocstringSectionKind.attributes, griffe.DocstringSectionKind.parameters)
    return {item.name: item.description for s in sections if s.kind in kinds for item in s.value}


def undocumented(cls: type) -> list[str]:
    """What is missing, one line per field: no entry, or an entry under ``MIN_WORDS`` words."""
    docs = field_docs(cls)
    problems = []
    for name in public_fields(cls):
        words = len(docs.get(name, "").split())
        if name not in docs:
            problems.append(f"{cls.__qualname__}.{name}: no entry in the docstring")
        elif words < MIN_WORDS:
            problems.append(f"{cls.__qualname__}.{name}: {words} word(s), {docs[name]!r}")
    return problems


def test_every_public_field_on_the_api_pages_has_a_sentence():
    classes = [c for page in PAGES for c in page_classes(page)]
    names = {c.__name__ for c in classes}
    assert {"GenerationResult", "DecodeConfig", "Method", "Stats", "Scheduler", "Request", "Committed"} <= names, names
    assert all(public_fields(c) for c in classes if c.__name__ in ("Scheduler", "Method"))
    assert [p for c in classes for p in undocumented(c)] == []


@dataclass
class _Terse:
    """A synthetic record documented the way the check refuses.

    Attributes:
        tokens: ids.
        mask: the attention mask, ``[B, L]``.
    """

    tokens: list
    mask: list
    width: int = 0


class _Plain:
    """A non-dataclass whose one field is documented.

    Attributes:
        pool: the queue and window of requests.
    """

    def __init__(self):
        self.pool, self._scratch = [], None


def test_the_check_fires_on_a_one_word_entry_and_a_missing_one():
    assert undocumented(_Terse) == ["_Terse.tokens: 1 word(s), 'ids.'", "_Terse.width: no entry in the docstring"]
    assert public_fields(_Plain) == ["pool"] and undocumented(_Plain) == []
