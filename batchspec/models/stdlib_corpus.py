"""The training corpus of the default pair: the Python standard library's source.

Every Python installation carries its standard library as ``.py`` files, so the
corpus is available offline on any machine. The exact bytes depend on the
Python version, which is why the held-out sample used by the tests is committed
next to the weights instead of being re-read from the local installation.

Selection: every ``*.py`` file under ``sysconfig.get_paths()["stdlib"]``, except
files under ``site-packages``/``dist-packages`` (third-party code, not the
standard library) and under test directories (``test``, ``tests``,
``idle_test``), which are mostly long data tables and regression cases.

Split: a file is held out when ``int(sha256(relative_path)[:8], 16) % 20 == 0``
(about 5% of the files). The split depends only on the file's path relative to
the stdlib root, so it is the same on every machine and in every run.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
HELD_OUT_MODULUS = 20


@dataclass(frozen=True)
class Corpus:
    """Train and held-out byte streams, each the concatenation of its files in path order."""

    root: str
    train_files: tuple[str, ...]
    held_out_files: tuple[str, ...]
    train: torch.Tensor  # [N_train] uint8
    held_out: torch.Tensor  # [N_held] uint8


def is_held_out(relative_path: str) -> bool:
    """The split rule: a stable hash of the path relative to the stdlib root."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % HELD_OUT_MODULUS == 0


def list_source_files(root: Path) -> list[str]:
    """Relative POSIX paths of the selected ``.py`` files under ``root``, sorted."""
    paths = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if EXCLUDED_DIRS.isdisjoint(rel.parts[:-1]) and path.is_file():
            paths.append(rel.as_posix())
    return sorted(paths)


def _concat(root: Path, files: list[str]) -> torch.Tensor:
    blob = b"".join((root / f).read_bytes() for f in files)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()  # [N]


def load_corpus(root: str | None = None) -> Corpus:
    """Read and split the stdlib source of this Python (or of the tree at ``root``)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = list_source_files(base)
    held = [f for f in files if is_held_out(f)]
    train = [f for f in files if not is_held_out(f)]
    return Corpus(str(base), tuple(train), tuple(held), _concat(base, train), _concat(base, held))


def even_windows(stream: torch.Tensor, window: int, count: int) -> torch.Tensor:
    """``count`` non-overlapping windows of ``window`` bytes, evenly spaced over ``stream``.

    Returns ``[count, window]`` int64 token ids. With ``count`` larger than the
    stream allows, every whole window is returned.
    """
    available = stream.numel() // window
    count = min(count, available)
    starts = [(i * available // count) * window for i in range(count)]
    return torch.stack([stream[s : s + window] for s in starts]).long()  # [count, window]


def random_batch(stream: torch.Tensor, batch: int, window: int, generator: torch.Generator) -> torch.Tensor:
    """``[batch, window]`` random training windows drawn with ``generator``."""
    starts = torch.randint(0, stream.numel() - window, (batch,), generator=generator)
    return torch.stack([stream[s : s + window] for s in starts.tolist()]).long()  # [B, window]
