"""``batchspec trace``: record every step of one run as JSON lines (``batchspec.trace``).

Runs one method (or EQSPEC with a fault from ``batchspec.faults``) on a model
pair, with every invariant checked after every step and recorded rather than
raised, and writes the trace (``--out``) and/or the step-through page
(``--html``); exit status 1 when the run broke an invariant (the files are
written all the same). The trace format is documented in :mod:`batchspec.trace`.
"""

from __future__ import annotations

from pathlib import Path

from .. import api, faults
from .common import add_pair_arguments, load_pair, positive_int
from .errors import UsageError


def register(subparsers) -> None:
    """Add the ``trace`` subcommand."""
    p = subparsers.add_parser("trace", help="record every step of a run (JSON lines, optional HTML viewer)",
                              description=__doc__.split("\n\n")[1])
    p.add_argument("--method", default="eqspec", help="a registered method (default %(default)s)")
    p.add_argument("--fault", help=f"inject a fault into EQSPEC: one of {', '.join(sorted(faults.CATALOGUE))}")
    add_pair_arguments(p)
    p.add_argument("--batch-size", type=positive_int, default=4, help="rows per batch B (default %(default)s)")
    p.add_argument("--prompts", type=positive_int, default=4, help="number of prompts (default %(default)s)")
    p.add_argument("-k", "--num-draft-tokens", type=positive_int, default=4,
                   help="draft tokens per round k (default %(default)s)")
    p.add_argument("--max-new-tokens", type=positive_int, default=16,
                   help="tokens to generate per prompt (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default %(default)s)")
    p.add_argument("--semantic", action="store_true", help="also run the semantic mode of I3")
    p.add_argument("--out", help="write the trace here (JSON lines)")
    p.add_argument("--html", help="write the step-through viewer page for this run here")
    p.set_defaults(func=main)


def check(args) -> None:
    """Every mistake in the command line, before any model is loaded."""
    if not (args.out or args.html):
        raise UsageError("nothing to write: give --out FILE.jsonl and/or --html FILE.html")
    if args.fault is not None:
        if args.fault not in faults.CATALOGUE:
            raise UsageError(f"unknown fault {args.fault!r}; known: {', '.join(sorted(faults.CATALOGUE))}")
        if args.method != "eqspec":
            raise UsageError(f"--fault is injected into EQSPEC; drop --method {args.method}")
    elif args.method not in api.METHODS:
        raise UsageError(f"unknown method {args.method!r}; known: {', '.join(sorted(api.METHODS))}")
    for path in (args.out, args.html):
        if path and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"cannot write {path}: folder {Path(path).resolve().parent} does not exist")
    if args.html:
        html_writer()


def html_writer():
    """``write_html(trace, path)`` from the viewer module, or a usage error naming what is missing."""
    try:
        from ..viz.html import write_html
    except ImportError as error:
        raise UsageError(f"--html needs the step-through viewer (batchspec.viz.html), which this install "
                         f"lacks ({error}); write --out FILE.jsonl instead") from None
    return write_html


def main(args) -> int:
    """Run ``batchspec trace`` with parsed ``args``; exit status 1 when the run broke an
    invariant (a check failed, as the help's exit codes say), else 0; the files are written either way."""
    from .. import trace

    check(args)
    pair = load_pair(args)  # a pair that is not available here is a UsageError before any weights load
    target, draft, eos = pair.target, pair.draft, pair.eos_token_id
    prompts = pair.prompts(args.prompts, args.seed)
    alphabet = "bytes" if args.pair == "default" else None
    try:
        recorded = trace.record(target, draft, prompts, args.method, fault=args.fault, semantic=args.semantic,
                                pair=args.pair, alphabet=alphabet, num_draft_tokens=args.num_draft_tokens,
                                max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                                eos_token_id=eos)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.out:
        recorded.save(args.out)
    if args.html:
        html_writer()(recorded, args.html)
    first = recorded.first_violation()
    found = "no violation" if first is None else \
        f"{len(recorded.violations)} violations, first {first['invariant']} at round {first['round']}, " \
        f"step {first['step']!r}, row {first['row']}"
    where = " and ".join(p for p in (args.out, args.html) if p)
    print(f"{args.fault or args.method} on {args.pair}: {len(recorded.steps)} steps, {found}; wrote {where}")
    return 1 if recorded.violations else 0
