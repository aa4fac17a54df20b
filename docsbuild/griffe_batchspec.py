"""Griffe extension for the API pages: one ``batchspec.*`` namespace, Sphinx roles as links.

Two things the docstrings and the layout do that mkdocstrings cannot render as is:

* ``reference/`` and ``invariants/`` are top-level folders that pyproject's
  ``package-dir`` installs as ``batchspec.reference`` and ``batchspec.invariants``.
  Griffe follows the editable install only for the top-level package, so it
  would document them as ``reference`` and ``invariants``. This extension
  loads both folders and mounts them under ``batchspec``, so every heading,
  anchor and cross-reference reads ``batchspec.reference...``, the name users import.
* Docstrings use Sphinx roles (``:class:`X```, ``:func:`~a.b```); Markdown
  would print them literally. Each role becomes an optional cross-reference to
  the object it names, resolved the way Python would from the docstring's
  scope; one that names nothing rendered on the site prints as plain code.
  Done here, at render time, so the docstrings stay as their authors wrote them.
* Dataclass fields carry their meaning and shape in a trailing comment
  (``tokens: torch.Tensor  # [B, L] ...``, Contributing §4.4); griffe reads no comments,
  so a field without a docstring gets that comment as its docstring and the
  page lists it with its shape.
"""

from __future__ import annotations

import io
import re
import tokenize

import griffe

ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj):`(~?)([\w.]+)`( s\b)?")
MOUNTED = ("reference", "invariants")  # folders installed as batchspec.<name>
SHAPE = re.compile(r"^(\[[^\]]*\](?:\[[^\]]*\])*)")  # a leading ``[B, L]`` or ``[B][T]``, shown as code


def _qualify(path: str) -> str:
    """Spell a path the way users import it (``reference.x`` -> ``batchspec.reference.x``)."""
    head = path.split(".", 1)[0]
    return f"batchspec.{path}" if head in MOUNTED else path


def _member_path(scope: griffe.Object, name: str) -> str | None:
    """The full path ``name`` has when looked up from ``scope`` (its own members, imports, then outward)."""
    first, _, rest = name.partition(".")
    while scope is not None:
        member = scope.members.get(first)
        if member is not None:
            base = member.target_path if member.is_alias else member.path
            return _qualify(f"{base}.{rest}" if rest else base)
        scope = scope.parent
    return None


def identifier(obj: griffe.Object, target: str) -> str:
    """The cross-reference identifier a role's ``target`` names, seen from ``obj``."""
    module = obj if obj.is_module else obj.module
    if target.startswith("."):  # relative module, as in ``from .cache import ...``
        package = module if module.is_init_module else module.parent
        return _qualify(f"{package.path}{target}")
    if target.split(".", 1)[0] in ("batchspec", *MOUNTED):
        return _qualify(target)
    return _member_path(obj, target) or target


def convert(obj: griffe.Object, text: str) -> str:
    """Replace every Sphinx role in ``text`` by an optional autorefs link (plain code if unresolved)."""

    def link(match: re.Match) -> str:
        short, target, plural = match.group(1), match.group(2), match.group(3) or ""
        shown = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        ident = identifier(obj, target)
        return f'<autoref identifier="{ident}" optional><code>{shown}</code></autoref>{plural.strip()}'

    return ROLE.sub(link, text)


def trailing_comment(line: str) -> str | None:
    """The ``# ...`` comment that ends a line of code, if any (not a ``#`` inside a string)."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return token.string.lstrip("#").strip() or None
    except (tokenize.TokenError, IndentationError):
        return None
    return None


def _document_field(attr: griffe.Object) -> None:
    """Give a class attribute without a docstring its trailing comment as one."""
    if attr.docstring is None and attr.parent.is_class and attr.lineno:
        comment = trailing_comment(attr.module.lines[attr.endlineno - 1])
        if comment:
            attr.docstring = griffe.Docstring(SHAPE.sub(r"`\1`", comment), parent=attr)


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias and member.parent is obj:
            yield from _walk(member)


class BatchspecNamespace(griffe.Extension):
    """Mount ``reference``/``invariants`` under ``batchspec`` and convert roles in every docstring."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.name != "batchspec":
            return
        for name in MOUNTED:
            pkg.set_member(name, loader.load(name))
        for obj in _walk(pkg):
            if obj.is_attribute:
                _document_field(obj)
            if obj.docstring is not None:
                obj.docstring.value = convert(obj, obj.docstring.value)
