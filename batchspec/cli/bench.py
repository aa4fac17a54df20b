"""``batchspec bench``: throughput of our methods and of transformers' own decoders, side by side.

Methods × batch sizes × k on one pair and device, every method once per
repeat (interleaved), every output checked token for token against the
target's batch-1 greedy output (exit 1 on any mismatch). Each call is
timed by wall clock and by process CPU time (CUDA-event time on a GPU);
each cell's ratio to generate is paired per repeat (generate's time / ours,
from the same repeat) and shown as median (min-max). The verdict uses the
CPU (GPU) ratios: faster if every repeat's is above 1, slower if every one
is below, on par if their range covers 1.00. It also measures each model's
forward cost and the prefill of every static batch, and from them the ideal
speedup with zero bookkeeping. auto calibrates before anything is timed.
A legend under the table says what each column means; under it, how steady
the machine was (a fixed workload timed before every timed case).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from ..bench import report, steadiness
from ..bench.run import OURS, PEERS, SPECULATIVE, Plan, run
from .common import (add_pair_arguments, draft_length, int_list, load_pair, nonnegative_int, policy_words,
                     positive_int, progress)
from .errors import UsageError

DEFAULT_METHODS = ("generate", "assisted", "autoregressive", "eqspec", "exspec")


def parse_ks(text: str) -> list:
    """``-k`` as a list of draft policies (Spec §4.2), each entry converted by
    :func:`~batchspec.cli.common.draft_length`."""
    out = []
    for entry in text.split(","):
        try:
            out.append(draft_length(entry))
        except argparse.ArgumentTypeError:
            raise UsageError(f"-k: expected comma-separated positive integers, {policy_words()}, got "
                             f"{entry.strip()!r} in {text!r}") from None
    return out


def parse_methods(text: str) -> list[str]:
    known = OURS + PEERS
    methods = [m.strip() for m in text.split(",")]
    unknown = [m for m in methods if m not in known]
    if unknown or not methods:
        raise UsageError(f"--methods: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")
    return methods


def register(subparsers) -> None:
    """Add the ``bench`` subcommand."""
    p = subparsers.add_parser("bench", help="throughput against transformers' decoders, with the ideal speedup",
                              description=__doc__.split("\n\n")[1], epilog=report.legend(torch.device("cpu")),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(p)
    p.set_defaults(dtype="float32")  # what a user times with; exactness is still checked on every output
    next(a for a in p._actions if a.dest == "dtype").help = "model precision (default float32)"
    p.add_argument("--methods", default=None,
                   help=f"comma-separated, from {', '.join(OURS + PEERS)} (default {','.join(DEFAULT_METHODS)}; "
                        f"{','.join(REAL_PAIR_METHODS)} on a real pair, where EXSPEC at one prompt per row is "
                        "EQSPEC; generate_batch is transformers' continuous batching, very slow on CPU)")
    p.add_argument("--batch-sizes", type=int_list, default=None,
                   help="comma-separated batch sizes (default 1,4,8,16,32; 1,4,8 on a real pair)")
    p.add_argument("-k", "--num-draft-tokens", default=None,
                   help=f"comma-separated k and/or draft policies auto, confident (default 4; {REAL_PAIR_KS} on a real pair)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None, help="default 48; 16 on a real pair")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="interleaved repeats (default 5; 2 on a real pair); the verdict needs at least 2")
    p.add_argument("--warmup", type=nonnegative_int, default=None,
                   help="untimed interleaved passes before the repeats (default 1; 0 on a real pair, whose "
                        "seconds-long calls leave nothing to warm up)")
    p.add_argument("--prompts-per-batch", type=positive_int, default=1,
                   help="prompts = this × batch size; > 1 is the case EXSPEC exists for (default 1)")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default %(default)s)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default %(default)s)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass (skipped on a real pair)")
    p.add_argument("--memory", action="store_true", help="run the peak-memory pass on a real pair too")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE ('-': standard output)")
    p.add_argument("--plots", metavar="DIR", help="write the plots (PNG) into DIR (needs matplotlib)")
    p.set_defaults(func=main)


#: A real pair's methods and draft policies when not given: the Benchmarks page's table.
REAL_PAIR_METHODS, REAL_PAIR_KS = ("generate", "assisted", "autoregressive", "eqspec"), "4,auto,confident"

#: (batch sizes, max_new_tokens, repeats, warm-up passes, methods, k, memory pass) when not given: the
#: embedded and tiny pairs take every case; a real pair (seconds per forward call on a CPU) the
#: Benchmarks page's table in about 20 minutes on the development CPU
SMALL_PAIR_PLAN = ([1, 4, 8, 16, 32], 48, 5, 1, ",".join(DEFAULT_METHODS), "4", True)
REAL_PAIR_PLAN = ([1, 4, 8], 16, 2, 0, ",".join(REAL_PAIR_METHODS), REAL_PAIR_KS, False)


def fill_plan_defaults(args) -> None:
    """The plan's defaults for ``args.pair``: a real pair gets batch 1, 4 and 8,
    16 tokens, 2 repeats, no warm-up and no memory pass, ``generate``, HF
    assisted, autoregressive and EQSPEC with ``k = 4``, ``auto`` and
    ``confident`` (every case would take hours on a CPU)."""
    small = args.pair in (None, "default") or args.pair.startswith("tiny-")
    defaults = SMALL_PAIR_PLAN if small else REAL_PAIR_PLAN
    names = ("batch_sizes", "max_new_tokens", "repeats", "warmup", "methods", "num_draft_tokens")
    for name, value in zip(names, defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.memory and args.no_memory:
        raise UsageError("--memory and --no-memory contradict each other: give one")
    if not (args.memory or args.no_memory):
        args.no_memory = not defaults[-1]


def main(args) -> int:
    fill_plan_defaults(args)
    ks = parse_ks(args.num_draft_tokens)
    methods = parse_methods(args.methods)
    if args.plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plots needs matplotlib: pip install 'batchspec[bench]'") from None
    torch.set_num_threads(args.threads)
    from transformers.utils import logging

    logging.set_verbosity_error()  # generate()'s advice on its own arguments would bury the table
    pair = load_pair(args)
    if pair.draft is None and any(m in SPECULATIVE for m in methods):
        raise UsageError(f"--pair {args.pair} has no draft model")
    plan = Plan(methods, sorted(set(args.batch_sizes)), ks, args.max_new_tokens, args.repeats,
                prompts_per_batch=args.prompts_per_batch, seed=args.seed, memory=not args.no_memory,
                warmup=args.warmup)
    quiet = args.json == "-"
    result = run(pair, plan, progress=lambda it, total: progress(it, total, "bench", enabled=not quiet))
    table_rows = report.rows(result["cells"])
    document = {"command": "batchspec " + " ".join(sys.argv[1:]) if sys.argv else None,
                "pair": pair.name, "dtype": str(pair.dtype).replace("torch.", ""),
                "machine": report.machine(pair.target.device), "plan": vars(plan),
                "costs": report.costs_dict(result["costs"], result.get("prefill")),
                "calibrations": result.get("calibrations"),
                "steadiness": result.get("steadiness"), "rows": table_rows}
    if args.json == "-":
        print(json.dumps(document, indent=1, default=str))
    else:
        print(f"{pair.name} ({document['dtype']}) on {pair.target.device}, {torch.get_num_threads()} thread(s), "
              f"{args.max_new_tokens} new tokens, {args.repeats} interleaved repeats")
        for c in result.get("calibrations") or ():
            print(f"auto calibrated at batch {c['batch_size']} in {c['seconds']:.2f} s (untimed): draft call "
                  f"{c['draft_call'] * 1e3:.1f} ms, target calls " +
                  ", ".join(f"{n} tok {s * 1e3:.1f} ms" for n, s in c["target_calls"].items()) +
                  (f", draft prefill {c['draft_prefill_per_position'] * 1e3:.2f} ms per prompt position"
                   if c.get("draft_prefill_per_position") is not None else ""))
        print(report.table(table_rows))
        print(report.legend(pair.target.device))
        machine_line = steadiness.line(result.get("steadiness"))
        if machine_line:
            print(machine_line)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(document, f, indent=1, default=str)
    if args.plots:
        for path in report.plots(table_rows, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    wrong = [r for r in table_rows if r["mismatches"]]
    for r in wrong:
        print(f"NOT EXACT: {r['method']} k={r['k']} batch {r['batch']}: prompts {r['mismatches']} differ from "
              "the target's batch-1 greedy output", file=sys.stderr)
    return 1 if wrong else 0
