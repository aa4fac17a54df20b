"""transformers' text-generation pipeline at ``batch_size=8`` with the draft as
``assistant_model`` and batchspec's folder passed through to ``generate``:
the same texts as the pipeline without an assistant, one prompt at a time
(Spec §5.2), on the embedded default pair with its bytes as a transformers tokenizer."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers import pipeline

from batchspec import hf
from batchspec.models.bytes import encode, hf_tokenizer as byte_tokenizer
from batchspec.models.default_pair import load_default_pair

TEXTS = ["import os\n", "def main(", "class Parser:\n    def __init__(self", "    return ",
         "for i in range(", "# Copyright", "if __name__ == ", "try:\n    import ", "x = [", "raise ValueError("]


@pytest.fixture(scope="module")
def default_pair():
    return load_default_pair(torch.float64)


def test_the_byte_tokenizer_is_the_pairs_encoding():
    tokenizer = byte_tokenizer("left")
    text = "def f(x):\n    return x  # é"
    assert tokenizer(text)["input_ids"] == encode(text) and tokenizer.decode(encode(text)) == text


@pytest.mark.slow
@pytest.mark.parametrize("side", ["left", "right"])
def test_the_pipeline_at_batch_8_gives_the_texts_of_plain_greedy_decoding(side, default_pair):
    target, draft = default_pair
    options = dict(max_new_tokens=16, do_sample=False, return_full_text=False)  # the pipeline samples by default
    tokenizer = byte_tokenizer(side)
    plain = pipeline("text-generation", model=target, tokenizer=tokenizer, batch_size=1)(TEXTS, **options)
    calls = []

    @functools.wraps(hf.generate)  # its signature declares draft=, which generate then forwards
    def counted(*args, **kwargs):
        calls.append(args[1].shape[0])
        return hf.generate(*args, **kwargs)

    fast = pipeline("text-generation", model=target, tokenizer=tokenizer, assistant_model=draft, batch_size=8)
    got = fast(TEXTS, custom_generate=counted, draft=draft, **options)
    assert got == plain and calls == [8, 2]  # two batches, speculated
    assert fast(TEXTS, custom_generate=hf.HUB, trust_remote_code=True, **options) == plain
