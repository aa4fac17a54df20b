"""Every ``§`` citation resolves to a heading inside the repository; nothing cites an issue.

A citation names its document: ``Spec §4.7`` (a heading ``§4.7`` of ``spec/``),
``Contributing §4.3`` (of ``CONTRIBUTING.md``), ``Paper §2`` (of
``docs/paper.md``, the paper's facts in the project's words). A bare ``§n`` means
the document it is written in when that document has ``§`` headings, and the
spec everywhere else. A ``§`` right after a word that names no document of the
repository (a word such as *notes* or *style* before the ``§``) points outside
it and fails, as does an id that the document lacks. Numbers of issues or pull
requests are history, not a reference a reader can follow: the word *issue* or
*PR* before a number, or a parenthesised ``#`` and number, fail; a bug of
another project is cited with that project's name (``transformers #30042``).
Both rules are shown failing on planted citations.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
FOLDERS = ("spec", "reference", "invariants", "batchspec", "tests", "tutorials", "docs", "docsbuild", "benchmarks")
TOP = ("README.md", "CONTRIBUTING.md", "mkdocs.yml", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yml", ".toml", ".css", ".js", ".html", ".txt"}
SKIP = ("katex", "__pycache__", ".ipynb_checkpoints")

#: document word -> the files whose ``§`` headings it cites
DOCUMENTS = {"spec": "spec/*.md", "contributing": "CONTRIBUTING.md", "paper": "docs/paper.md"}
#: words that may stand before a bare ``§`` (which then means the spec or the file's own document)
PLAIN = {"of", "in", "by", "through", "is", "so", "and", "or", "why", "are", "like", "unlike", "satisfy",
         "check", "what", "sections", "section", "see", "to", "from", "under", "with", "as", "at", "per", "its",
         "the", "also", "not"}
ID = r"§(\d+(?:\.\d+)*)"
CITATION = re.compile(rf"(?:\b([A-Za-z][\w-]*)\s+)?{ID}((?:\s*(?:,|and|or|/|–|-|to)\s*§\d+(?:\.\d+)*)*)")
HEADING = re.compile(rf"^#{{1,6}}\s+{ID}", re.M)
ISSUE = re.compile(r"\b(?:issues?|PR|pull request|ticket)\s*#?\d+", re.I)
HASH = re.compile(r"(?:\b([A-Za-z][\w-]*)\s+|\()#\d+\b")
#: what may stand before ``#n``: another project's name, or a numbered call
OTHERS = {"transformers", "mlx-vlm", "call"}


def ids(pattern: str) -> set[str]:
    return {i for path in ROOT.glob(pattern) for i in HEADING.findall(path.read_text())}


def files() -> list[Path]:
    found = [ROOT / name for name in TOP]
    for folder in FOLDERS:
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and not any(part in SKIP for part in p.parts) and not p.is_relative_to(ROOT / "docs" / "spec")]
    return [p for p in found if p != Path(__file__).resolve()]


def citation_problems(name: str, text: str, own: set[str], known: dict[str, set[str]]) -> list[str]:
    """What in ``text`` (the file ``name``) cites a heading the repository lacks.

    ``own``: the ids of the file's own ``§`` headings (empty for most files);
    ``known``: document word -> its ids."""
    problems = []
    headings = {m.start(1) for m in HEADING.finditer(text)}
    for match in CITATION.finditer(text):
        if match.start(2) - 1 in headings:
            continue  # a heading defines its id
        word = (match.group(1) or "").lower()
        line = text.count("\n", 0, match.start()) + 1
        if word in known:
            where, document = known[word], word
        elif word and word not in PLAIN:
            problems.append(f"{name}:{line}: '{match.group(1)} §{match.group(2)}' cites no document "
                            f"of the repository (cite {', '.join(sorted(known))})")
            continue
        else:
            where, document = (own, "this file") if own else (known["spec"], "spec")
        for section in [match.group(2), *re.findall(ID, match.group(3))]:
            if section not in where:
                problems.append(f"{name}:{line}: §{section} is not a heading of {document}")
    return problems


def issue_problems(name: str, text: str) -> list[str]:
    """Every issue or pull-request number that ``text`` cites."""
    found = [m for m in ISSUE.finditer(text)]
    if not name.endswith((".css", ".js", ".html")):  # colours there: #333
        found += [m for m in HASH.finditer(text) if (m.group(1) or "").lower() not in OTHERS
                  and not any(i.start() <= m.end() <= i.end() for i in found)]
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: cites {m.group(0).strip()!r}"
            for m in sorted(found, key=lambda m: m.start())]


def known() -> dict[str, set[str]]:
    return {word: ids(pattern) for word, pattern in DOCUMENTS.items()}


def test_every_citation_resolves_to_a_heading_of_the_repository():
    documents, problems, scanned = known(), [], files()
    assert len(scanned) > 150 and all(len(i) > 5 for i in documents.values())  # an empty scan passes anything
    for path in scanned:
        text = path.read_text()
        own = next((documents[word] for word, pattern in DOCUMENTS.items() if path in ROOT.glob(pattern)), set())
        problems += citation_problems(str(path.relative_to(ROOT)), text, own, documents)
    assert not problems, "\n".join(problems)


def test_nothing_cites_an_issue_number():
    problems = [p for path in files() for p in issue_problems(str(path.relative_to(ROOT)), path.read_text())]
    assert not problems, "\n".join(problems)


#: the planted outside words, assembled here so that this file itself cites nothing outside
PLANTED_STYLE, PLANTED_NOTES, PLANTED_ISSUE, PLANTED_PR = "sty" + "le §7", "no" + "tes §5", "iss" + "ue 24", "P" + "R #7"


def test_planted_citations_fail():
    documents = known()
    planted = (f"Timing stays outside ({PLANTED_STYLE}).\n"
               f"See the paper {PLANTED_NOTES} and Spec §4.7, §99.1.\n"
               "As Contributing §4.3 says; Paper §2 and §42.\n"
               "The round (§4.7) and the registry (§3.11), not (§12).\n")
    assert citation_problems("planted.py", planted, set(), documents) == [
        f"planted.py:1: '{PLANTED_STYLE}' cites no document of the repository (cite contributing, paper, spec)",
        f"planted.py:2: '{PLANTED_NOTES}' cites no document of the repository (cite contributing, paper, spec)",
        "planted.py:2: §99.1 is not a heading of spec",
        "planted.py:3: §42 is not a heading of paper",
        "planted.py:4: §12 is not a heading of spec",
    ]
    # in a document with § headings, a bare § means that document
    assert citation_problems("planted.md", "## §1 Set up\nsee §1 and §2\n", {"1"}, documents) == [
        "planted.md:2: §2 is not a heading of this file"]


def test_planted_issue_numbers_fail():
    planted = f"Legible ({PLANTED_ISSUE}); see {PLANTED_PR} and (#30778).\nA bug (transformers #30042) at call #12.\n"
    assert issue_problems("planted.py", planted) == [
        f"planted.py:1: cites '{PLANTED_ISSUE}'", f"planted.py:1: cites '{PLANTED_PR}'", "planted.py:1: cites '(#30778'"]
    assert issue_problems("planted.css", "a { color: #333; border: 1px solid #333 }") == []
