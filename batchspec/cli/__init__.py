"""The ``batchspec`` command line.

One module per command (``batchspec.cli.demo``, ``.compare``, ``.audit``,
``.models``), each with ``register(subparsers)`` that adds its parser and sets
``func(args) -> exit status``.

Exit status: 0 success; 1 the command ran and its check failed (outputs not
exact, an algorithmic divergence); 2 a usage error, reported in one line on
standard error before any model runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UsageError

#: the command modules, in the order ``--help`` lists them
COMMANDS = ("demo", "compare", "audit", "models", "conformance")


def parser() -> argparse.ArgumentParser:
    """The argument parser with every command."""
    from .. import __version__

    top = argparse.ArgumentParser(prog="batchspec", description="Correct batch speculative decoding, "
                                  "specified and checked. Exit status: 0 success, 1 a check failed, "
                                  "2 a usage error.")
    top.add_argument("--version", action="version", version=f"batchspec {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return top


def main(argv=None) -> int:
    """Entry point of the ``batchspec`` script."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # weight-loading bars would interleave with the tables
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"batchspec {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
