"""``batchspec`` command line: ``demo`` (the main job) and the subcommands of
the other modules, each registered by a ``register(subparsers)`` function."""

from __future__ import annotations

import argparse
import importlib
import sys

#: modules that add subcommands; a missing optional one is skipped
SUBCOMMANDS = ("batchspec.cli_demo", "batchspec.cli_compare", "batchspec.cli_audit", "batchspec.cli_models")


def parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    top = argparse.ArgumentParser(prog="batchspec", description=__doc__.split("\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(sub)
    return top


def main(argv=None) -> int:
    """Entry point of the ``batchspec`` script."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # weight-loading bars would interleave with the tables
    args = parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
