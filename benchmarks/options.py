"""Command-line types the benchmark scripts share: a count that is not a
positive whole number is refused by argparse, naming the option, before any
model loads (``error: argument --repeat: 0 is less than 1``)."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """An option that counts something (rows, runs, tokens, threads): an integer of 1 or more."""
    return _at_least(text, 1)


def size(text: str) -> int:
    """An option in bytes, 0 for none (``--mmap-threshold``): an integer of 0 or more."""
    return _at_least(text, 0)


def token_ids(text: str) -> list:
    """Comma-separated token ids (``--eos 151643,151645``): integers of 0 or more."""
    try:
        return [size(x) for x in text.split(",")]
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error} (give token ids such as 151643,151645)") from None


def _at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} is less than {least}")
    return value


def lengths(text: str) -> list:
    """Comma-separated counts, each :func:`positive` (``--max-new-tokens 32,256,1024``)."""
    try:
        return [positive(x) for x in text.split(",")]
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error} (give counts such as 32,256,1024)") from None
