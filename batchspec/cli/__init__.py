"""The ``batchspec`` command line.

One module per command (``batchspec.cli.demo``, ``.compare``, ``.audit``,
``.models``), each with ``register(subparsers)`` that adds its parser and sets
``func(args) -> exit status``. Shared options and types: :mod:`.common`.

Exit status (:data:`EXIT_CODES`): 0 success; 1 the command ran and its check
failed (outputs not exact, a divergence, an invariant broken); 2 a usage error, reported in one
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

#: the commands, in the order ``--help`` lists them, with the line it shows for each
#: (a command's module registers the same line: tests/api_cli/test_cli_errors.py keeps them equal)
COMMANDS = {
    "demo": "EQSPEC against the autoregressive baseline, every invariant checked after every step",
    "compare": "methods x batch sizes on a model pair (paper Table 1)",
    "audit": "compare candidate outputs with reference outputs",
    "models": "list the model pairs; fetch the real pair",
    "bench": "throughput against transformers' decoders, with the ideal speedup",
    "trace": "record every step of a run (JSON lines, optional HTML viewer)",
    "conformance": "export test vectors, or check a decoder against them",
}

EXIT_CODES = {0: "success", 1: "a check failed (outputs not exact, a divergence, an invariant broken)",
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

    def parse_args(self, args=None, namespace=None):
        """Unrecognised words are reported by the (sub)command that was given them, so
        the line names its options and its ``--help``, not the top-level one's."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            innermost(self, parsed).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def innermost(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest command parser that ``parsed`` went through (``batchspec conformance check``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(parsed, action.dest, None)
            if chosen in action.choices:
                return innermost(action.choices[chosen], parsed)
    return parser


def options(parser: argparse.ArgumentParser) -> set:
    """Every option string of ``parser`` and of its commands (registered ones: see :func:`parser`)."""
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


def parser(commands=tuple(COMMANDS)) -> argparse.ArgumentParser:
    """The argument parser; the commands in ``commands`` fully registered (their modules
    imported, which loads torch), the others by name and help line only, enough for
    ``batchspec --help`` and for a misspelled command's error."""
    from .. import __version__

    top = Parser(prog="batchspec", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                 description="Correct batch speculative decoding (EQSPEC / EXSPEC), specified and checked:\n"
                             "run the methods on a model pair, compare them, audit any engine's outputs.\n"
                             "`batchspec COMMAND --help` describes each command.")
    top.add_argument("--version", action="version", version=f"batchspec {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                             parser_class=Parser)
    for name, line in COMMANDS.items():
        if name in commands:
            importlib.import_module(f"{__name__}.{name}").register(sub)
        else:
            sub.add_parser(name, help=line)
    for name in commands:
        command = sub.choices[name]
        command.epilog = command.epilog or EPILOG
        # module docs are reST: plain text in a terminal (``x`` and :mod:`x` both read as x)
        command.description = re.sub(r":\w+:`([^`]*)`", r"\1", (command.description or "").replace("``", ""))
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return top


def named_command(argv: list[str]) -> tuple[str, ...]:
    """The command ``argv`` names (its first word that is not an option), if it is one."""
    words = [word for word in argv if not word.startswith("-")]
    return (words[0],) if words and words[0] in COMMANDS else ()


def main(argv=None) -> int:
    """Entry point of the ``batchspec`` script: the exit status (see :data:`EXIT_CODES`).
    Only the command that runs is imported: ``batchspec --help`` loads neither torch
    nor transformers."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser(named_command(argv)).parse_args(argv)
    except SystemExit as done:  # --help, --version, or a one-line argparse error
        return done.code if isinstance(done.code, int) else 2
    from transformers.utils import logging

    logging.disable_progress_bar()  # weight-loading bars would interleave with the tables
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
