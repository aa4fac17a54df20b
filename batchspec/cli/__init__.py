"""The ``batchspec`` command line.

One module per command (``batchspec.cli.demo``, ``.compare``, ``.audit``,
``.models``), each with ``register(subparsers)`` that adds its parser and sets
``func(args) -> exit status``. Shared options and types: :mod:`.common`.

Exit status (:data:`EXIT_CODES`): 0 success; 1 the command ran and its check
failed (outputs not exact, a divergence); 2 a usage error, reported in one
line on standard error before any model runs; 130 interrupted (Ctrl-C); 141
standard output closed early (``| head``), quietly.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys

from .errors import UsageError

#: the command modules, in the order ``--help`` lists them
COMMANDS = ("demo", "compare", "audit", "models", "bench", "trace", "conformance")

EXIT_CODES = {0: "success", 1: "a check failed (outputs not exact, a divergence)",
              2: "usage error: one line on stderr naming the problem, before any model runs",
              130: "interrupted (Ctrl-C)", 141: "standard output closed early (e.g. `| head`), quietly"}
EPILOG = "exit status:\n" + "\n".join(f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), exit status 2;
    options are never abbreviated, and a misspelled one gets a suggestion."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # --max-new-token is a mistake, not --max-new-tokens
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}{suggestion(self, message)} (see {self.prog} --help)\n")


def options(parser: argparse.ArgumentParser) -> set:
    """Every option string of ``parser`` and of its commands."""
    found = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found |= options(command)
    return found


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``; did you mean --batch-size?`` for each unrecognised option close to a known one."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    known = sorted(options(parser))
    hints = []
    for word in message.split(":", 1)[1].split():
        close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.75) if word.startswith("-") else []
        hints += [f"{word} -> {close[0]}"] if close else []
    return f"; did you mean: {', '.join(hints)}?" if hints else ""


def parser() -> argparse.ArgumentParser:
    """The argument parser with every command."""
    from .. import __version__

    top = Parser(prog="batchspec", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                 description="Correct batch speculative decoding (EQSPEC / EXSPEC), specified and checked:\n"
                             "run the methods on a model pair, compare them, audit any engine's outputs.\n"
                             "`batchspec COMMAND --help` describes each command.")
    top.add_argument("--version", action="version", version=f"batchspec {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                             parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    for command in sub.choices.values():
        command.epilog = command.epilog or EPILOG
        # module docs are reST: plain text in a terminal (``x`` and :mod:`x` both read as x)
        command.description = re.sub(r":\w+:`([^`]*)`", r"\1", (command.description or "").replace("``", ""))
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return top


def main(argv=None) -> int:
    """Entry point of the ``batchspec`` script: the exit status (see :data:`EXIT_CODES`)."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # weight-loading bars would interleave with the tables
    try:
        args = parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or a one-line argparse error
        return done.code if isinstance(done.code, int) else 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, not at interpreter exit
        return status
    except UsageError as error:
        print(f"batchspec {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"batchspec {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly; point stdout at devnull so
        # the interpreter's final flush does not raise again (Python docs, signal).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
