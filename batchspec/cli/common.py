"""What every command shares: ``--pair/--device/--dtype``, loading the pair,
argparse types that reject nonsense with one clear line, and a progress bar
that only a terminal sees."""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import torch

from ..models.registry import DTYPES  # the --dtype names (batchspec.cli.audit imports them from here)
from . import pairs
from .errors import UsageError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    return _bounded_int(text, 1, "a positive integer")


def draft_length(text: str):
    """argparse type: ``-k``, an int >= 1 or a draft policy's name, as the
    :class:`~batchspec.reference.draft_policy.DraftPolicy` it names (Spec §4.2)."""
    from ..reference.draft_policy import as_policy

    try:
        return as_policy(int(text) if text.strip().isdigit() else text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, {policy_words()}, got {text}") from None


def policy_words() -> str:
    """The draft policies' names for a message: ``'auto' or 'confident'``."""
    from ..reference.draft_policy import POLICY_NAMES

    quoted = [repr(name) for name in POLICY_NAMES]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    return _bounded_int(text, 0, "an integer >= 0")


def _bounded_int(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated positive ints; an empty entry (``1,,4``) is an error, not skipped."""
    entries = text.split(",")
    if any(not e.strip() for e in entries):
        raise argparse.ArgumentTypeError(f"empty entry in {text!r}; expected comma-separated positive integers")
    return [positive_int(e.strip()) for e in entries]


def device_name(text: str) -> str:
    """argparse type: ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (whether it exists is checked in :func:`load_pair`)."""
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or mps, got {text!r}")
    return text


def check_device(name: str) -> torch.device:
    """``name`` as a device, or a :class:`UsageError` when this machine has none such."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available here (torch {torch.__version__}, "
                             f"built with CUDA {torch.version.cuda or 'none'})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available here")
    return device


def add_pair_arguments(parser: argparse.ArgumentParser, default: str = pairs.DEFAULT_PAIR) -> None:
    """Add ``--pair``, ``--device`` and ``--dtype`` (``batchspec models list`` shows the pairs)."""
    shown = "the embedded byte-level pair, 'default'" if default == pairs.DEFAULT_PAIR else repr(default)
    parser.add_argument("--pair", choices=list(pairs.PAIRS), default=default, metavar="NAME",
                        help="model pair, one of: " + ", ".join(pairs.PAIRS) +
                             f" (if omitted: {shown}; `batchspec models list` says which are available here)")
    parser.add_argument("--device", type=device_name, default="cpu",
                        help="cpu, cuda, cuda:N or mps (default %(default)s)")
    parser.add_argument("--dtype", choices=list(DTYPES), default=None,
                        help="model precision (default: float64 for the tiny and default pairs, "
                             "else the pair's own)")


@dataclass
class LoadedPair:
    """A pair ready to run: the models, prompts that suit its vocabulary, its EOS id and a decoder for text."""

    name: str
    description: str
    target: PreTrainedModel
    draft: PreTrainedModel
    prompts: Callable[[int, int], list[list[int]]]  # (count, seed) -> token ids
    eos_token_id: int | list[int] | None
    decode: Callable[[list[int]], str] | None
    dtype: torch.dtype


def load_pair(args) -> LoadedPair:
    """The pair named by ``args.pair`` on ``args.device`` in ``args.dtype``; a
    :class:`UsageError` (before any weights load) when it is not available here."""
    name = args.pair
    entry = pairs.PAIRS[name]
    device = check_device(args.device)
    available, reason = entry.check()
    if not available:
        raise UsageError(f"--pair {name}: {reason}")
    dtype = DTYPES[args.dtype] if args.dtype else pairs.default_dtype(name)
    target, draft, tokenizer = entry.load(dtype, device, False)
    return LoadedPair(name, entry.description, target, draft, _prompt_maker(entry.kind, tokenizer, target),
                      pairs.eos_token_id(name, target, tokenizer),
                      getattr(tokenizer, "decode", None), target.dtype)


def _prompt_maker(kind: str, tokenizer, target) -> Callable[[int, int], list[list[int]]]:
    if kind == "tiny":
        return pairs.tiny_prompts
    if kind == "embedded":
        return pairs.default_prompts
    if tokenizer is not None:
        return lambda count, seed: pairs.text_prompts(tokenizer, count, seed)
    vocab = int(target.config.vocab_size)

    def random_ids(count, seed):  # no tokenizer: random ids above the usual special ones
        rng = random.Random(seed)
        return [[rng.randrange(3, vocab) for _ in range(rng.randint(4, 16))] for _ in range(count)]

    return random_ids


#: Seconds between two progress lines when standard error is not a terminal.
PROGRESS_EVERY = 30.0


def progress(iterable: Iterable, total: int | None = None, desc: str | None = None, enabled: bool = True):
    """``iterable``, with a tqdm bar on standard error when that is a terminal and ``enabled``
    (commands pass ``not args.json``); into a file or a pipe, one plain line at most every
    :data:`PROGRESS_EVERY` seconds (``bench: 12/48 after 3.5 min``), so that a long run
    written to a log still shows how far it is."""
    if not enabled:
        return iterable
    if not sys.stderr.isatty():
        return _progress_lines(iterable, total, desc or "progress")
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False, file=sys.stderr)


def _progress_lines(iterable: Iterable, total: int | None, desc: str):
    began = last = time.monotonic()
    for done, item in enumerate(iterable):
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            last = now
            print(f"{desc}: {done}/{total if total is not None else '?'} after {(now - began) / 60:.1f} min",
                  file=sys.stderr, flush=True)
        yield item
