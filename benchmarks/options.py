"""Command-line types the benchmark scripts share: a count that is not a
positive whole number is refused by argparse, naming the option, before any
model loads (``error: argument --repeat: 0 is less than 1``)."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """An option that counts something (rows, runs, tokens, threads): an integer of 1 or more."""
    return _at_least(text, 1)


def non_negative(text: str) -> int:
    """An integer of 0 or more: a size in bytes, 0 for none (``--mmap-threshold``), or a token id."""
    return _at_least(text, 0)


def lengths(text: str) -> list:
    """Comma-separated counts, each :func:`positive` (``--max-new-tokens 32,256,1024``)."""
    return _each(text, positive, "counts such as 32,256,1024")


def token_ids(text: str) -> list:
    """Comma-separated token ids, each :func:`non_negative` (``--eos 151643,151645``)."""
    return _each(text, non_negative, "token ids such as 151643,151645")


def _at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} is less than {least}")
    return value


def _each(text: str, read, example: str) -> list:
    """``text`` split at commas, each part read by ``read``; an error names the whole list."""
    try:
        return [read(x) for x in text.split(",")]
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error} (give {example})") from None
