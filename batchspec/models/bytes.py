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
