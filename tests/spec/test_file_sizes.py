"""Library files stay small (Contributing §4.5): one concept per file, at most
:data:`LIMIT` lines in ``batchspec/``, ``reference/`` and ``invariants/``."""

from __future__ import annotations

from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
LIBRARY = ("batchspec", "reference", "invariants")
LIMIT = 300


def too_long(root: Path, folders=LIBRARY, limit: int = LIMIT) -> list[str]:
    """``"path: n lines"`` for every Python file under ``root/folder`` longer than ``limit``."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > limit:
                out.append(f"{path.relative_to(root)}: {lines} lines (at most {limit}, Contributing §4.5)")
    return out


def test_no_library_file_is_over_the_limit():
    files = [p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py")]
    assert len(files) > 50  # an empty scan would pass anything
    found = too_long(ROOT)
    assert not found, "split along a seam, one concept per file:\n" + "\n".join(found)


def test_the_limit_fires_on_a_planted_long_file(tmp_path):
    (tmp_path / "reference" / "deep").mkdir(parents=True)
    (tmp_path / "reference" / "deep" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "reference" / "short.py").write_text("x = 1\n" * LIMIT)  # at the limit: allowed
    (tmp_path / "reference" / "notes.txt").write_text("x\n" * (LIMIT + 50))  # not Python
    assert too_long(tmp_path, ("reference",)) == [
        f"{Path('reference/deep/long.py')}: {LIMIT + 1} lines (at most {LIMIT}, Contributing §4.5)"]
