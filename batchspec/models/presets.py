"""The paper's model pairs as named presets, loaded from the local Hugging Face cache.

Paper §6: Vicuna-7B/68M, Qwen3-8B/0.6B, GLM-4-9B/0.6B. Nothing is
downloaded unless the caller passes ``allow_download=True``: otherwise a
missing repository raises :class:`MissingModelError` naming the repository ids
and the files that are not in the cache, with the command that fetches them.

The same function, :func:`load_hub_pair`, loads a preset and any other
``HubPair``; the tests run it on tiny models saved into a temporary folder laid
out as a Hugging Face cache (``cache_dir``), so the code a GPU user runs is the
code the suite exercises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

CONFIG = "config.json"
#: Weight layouts a repository may use, in the order transformers tries them.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


class MissingModelError(FileNotFoundError):
    """A preset's files are not in the local Hugging Face cache."""


@dataclass(frozen=True)
class HubPair:
    """A target/draft pair of Hugging Face Hub repositories."""

    name: str
    target: str  # repository id
    draft: str
    description: str
    revision: str = "main"


PRESETS = {
    "vicuna-7b-68m": HubPair("vicuna-7b-68m", "lmsys/vicuna-7b-v1.3", "double7/vicuna-68m",
                             "Vicuna-7B v1.3 with the 68M Vicuna draft (Paper §6, Llama)"),
    "qwen3-8b-0.6b": HubPair("qwen3-8b-0.6b", "Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B",
                             "Qwen3-8B with Qwen3-0.6B (Paper §6)"),
    "glm4-9b-0.6b": HubPair("glm4-9b-0.6b", "zai-org/GLM-4-9B-0414", "jukofyork/GLM-4.5-DRAFT-0.6B-v3.0",
                            "GLM-4-9B-0414 with a 0.6B GLM-vocabulary draft (Paper §6)"),
}


def _cached(repo: str, filename: str, cache_dir, revision: str) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir, revision=revision)
    return found if isinstance(found, str) else None


def missing_files(repo: str, cache_dir=None, revision: str = "main") -> list[str]:
    """Files of ``repo`` needed to load it that the local cache lacks (``[]``: loadable).

    Needs ``config.json`` and one complete weight layout: a single file, or an
    index together with every shard it lists.
    """
    missing = [] if _cached(repo, CONFIG, cache_dir, revision) else [CONFIG]
    for name in WEIGHT_FILES:
        path = _cached(repo, name, cache_dir, revision)
        if path is None:
            continue
        if not name.endswith(".index.json"):
            return missing
        with open(path) as index:
            shards = sorted(set(json.load(index)["weight_map"].values()))
        absent = [s for s in shards if _cached(repo, s, cache_dir, revision) is None]
        return missing + absent
    return missing + ["weights (model.safetensors or pytorch_model.bin, single or sharded)"]


def download_patterns(files: list[str]) -> list[str]:
    """The files of a repository to download: config, tokenizer and one weight format.

    safetensors when the repository has them, else the PyTorch ``.bin`` files
    (never both, and not the other formats some repositories add: GGUF, ONNX...).
    """
    top = [f for f in files if "/" not in f]  # not original/, onnx/, ... subfolders
    weights = [f for f in top if f.startswith("model") and f.endswith((".safetensors", ".safetensors.index.json"))]
    if not weights:
        weights = [f for f in top if f.startswith("pytorch_model") and f.endswith((".bin", ".bin.index.json"))]
    other = [f for f in top if f.endswith(".json") and not f.endswith(".index.json")
             or f.startswith("tokenizer") or f.endswith((".model", ".txt", ".jinja"))]
    return sorted(set(weights + other))


def download_pair(pair: HubPair) -> list[str]:
    """Download ``pair`` into the Hugging Face cache (network); return the snapshot folders."""
    from huggingface_hub import list_repo_files, snapshot_download

    return [snapshot_download(repo, revision=pair.revision,
                              allow_patterns=download_patterns(list_repo_files(repo, revision=pair.revision)))
            for repo in (pair.target, pair.draft)]


def download_command(pair: HubPair) -> str:
    return "; ".join(f"hf download {repo}" for repo in (pair.target, pair.draft))


def check_hub_pair(pair: HubPair, cache_dir=None) -> tuple[bool, str]:
    """``(available, reason)`` for ``pair`` in the local cache."""
    gaps = {repo: missing_files(repo, cache_dir, pair.revision) for repo in (pair.target, pair.draft)}
    gaps = {repo: files for repo, files in gaps.items() if files}
    if not gaps:
        return True, f"in the local Hugging Face cache ({pair.target}, {pair.draft})"
    listed = "; ".join(f"{repo}: missing {', '.join(files)}" for repo, files in gaps.items())
    return False, (f"not in the local Hugging Face cache: {listed}. Fetch with `{download_command(pair)}` "
                   f"or load with allow_download=True (`--allow-download`)")


def _load_model(repo: str, dtype, device, local_only: bool, cache_dir, revision: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        repo, dtype=dtype, attn_implementation="sdpa", local_files_only=local_only,
        cache_dir=cache_dir, revision=revision)
    return model.to(device).eval()


def _load_tokenizer(repo: str, local_only: bool, cache_dir, revision: str):
    """The target's tokenizer, or ``None`` when the repository has no tokenizer file."""
    from transformers import AutoTokenizer

    if local_only and not any(_cached(repo, f, cache_dir, revision) for f in TOKENIZER_FILES):
        return None
    return AutoTokenizer.from_pretrained(repo, local_files_only=local_only, cache_dir=cache_dir,
                                         revision=revision)


def load_hub_pair(pair: HubPair, dtype=None, device="cpu", allow_download: bool = False,
                  cache_dir=None):
    """``(target, draft, tokenizer or None)`` of ``pair``, SDPA attention, eval mode.

    ``dtype`` defaults to float16 on CUDA (the paper's setting) and float32
    elsewhere. Without ``allow_download`` the files must already be cached;
    otherwise :class:`MissingModelError` says which are not.
    """
    if dtype is None:
        dtype = torch.float16 if torch.device(device).type == "cuda" else torch.float32
    if not allow_download:
        available, reason = check_hub_pair(pair, cache_dir)
        if not available:
            raise MissingModelError(f"pair {pair.name!r} is {reason}")
    local_only = not allow_download
    target = _load_model(pair.target, dtype, device, local_only, cache_dir, pair.revision)
    draft = _load_model(pair.draft, dtype, device, local_only, cache_dir, pair.revision)
    return target, draft, _load_tokenizer(pair.target, local_only, cache_dir, pair.revision)
