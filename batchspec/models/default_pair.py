"""The embedded default target/draft pair: byte-level Llamas trained on the stdlib.

The weights ship inside the package (``batchspec/models/default/``), so the
examples, tests and benchmarks have a real, trained pair on any machine with no
download. ``MODEL_CARD.md`` beside the weights says how they were made and how
well they do; ``card.json`` holds the same figures for programs and tests.

Layout of ``default/``::

    target/config.json, target/model.safetensors    # deep model (the one to be sped up)
    draft/config.json,  draft/model.safetensors     # one-layer model
    held_out_sample.safetensors                     # "windows": [64, 256] uint8
    card.json, MODEL_CARD.md

Token ids are bytes (see ``batchspec.models.bytes``); there is no EOS token.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

from .quiet import no_progress_bars

DEFAULT_DIR = Path(__file__).parent / "default"
HELD_OUT_SAMPLE_FILE = "held_out_sample.safetensors"


def load_model(path: Path, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """Load one saved model folder in ``dtype``, with SDPA attention, in eval mode."""
    with no_progress_bars():
        model = LlamaForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def load_default_pair(dtype: torch.dtype = torch.float32, directory: Path = DEFAULT_DIR
                      ) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """Return ``(target, draft)`` from the committed weights (stored as float16).

    ``dtype`` is the compute dtype; the card's figures are measured in float32.
    """
    return load_model(directory / "target", dtype), load_model(directory / "draft", dtype)


def held_out_sample(directory: Path = DEFAULT_DIR) -> torch.Tensor:
    """The committed held-out sample: ``[64, 256]`` int64 byte ids.

    64 windows of 256 bytes evenly spaced over the held-out stdlib files of the
    Python that trained the pair. It is stored rather than re-read so that the
    card's figures can be checked on any Python version.
    """
    return load_file(directory / HELD_OUT_SAMPLE_FILE)["windows"].long()


def load_card(directory: Path = DEFAULT_DIR) -> dict:
    """The machine-readable model card (``card.json``)."""
    return json.loads((directory / "card.json").read_text())
