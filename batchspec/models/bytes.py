"""Byte-level "tokenizer" of the embedded default model pair.

Token ``i`` is the byte ``i``: the vocabulary is the 256 byte values, so no
tokenizer file is needed and every machine can encode text offline.

EOS choice: **none** (``EOS_TOKEN_ID = None``). The pair is trained on Python
source, which has no natural end-of-text symbol, and the obvious candidate, the
newline byte, would stop generation after a single line. Generation therefore
always runs to ``max_new_tokens``.
"""

from __future__ import annotations

VOCAB_SIZE = 256
EOS_TOKEN_ID: int | None = None


def encode(text: str) -> list[int]:
    """Return the UTF-8 bytes of ``text`` as token ids (each in ``0..255``)."""
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """Return the text whose UTF-8 bytes are ``ids``.

    Invalid byte sequences (a generation cut in the middle of a multi-byte
    character, say) decode to U+FFFD instead of raising.
    """
    return bytes(ids).decode("utf-8", errors="replace")


def hf_tokenizer(padding_side: str = "left"):
    """The same encoding as a transformers tokenizer (for ``tokenizer(texts,
    padding=True, return_tensors="pt")``, pipelines, ``batch_decode``): token
    ``i`` is byte ``i``; byte 0 (NUL, absent from source code) is the pad."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()  # byte -> the printable character byte-level BPE vocabularies use
    core = Tokenizer(models.WordLevel({chars[b]: b for b in range(VOCAB_SIZE)}, unk_token=chars[0]))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                                                  pre_tokenizers.Split("", "isolated")])
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=chars[0], padding_side=padding_side)
