"""``batchspec demo``: EQSPEC against the autoregressive baseline, every invariant checked
after every step.

A first pass decodes with every invariant checked after every step; then
``--repeats`` timed passes, the methods interleaved in each, decode
unchecked. Columns: exact = prompts whose EQSPEC output equals the
baseline's; tok/call = tokens committed per row per target call (1 for the
baseline, up to k + 1); accept = accepted / drafted draft tokens; target,
draft = forward calls; time s = wall-clock seconds decoding, median over the
timed passes; check s = seconds the first pass spent checking invariants;
speedup = the baseline's time / this one's, paired per pass, median, by
process CPU time (CUDA-event time on a GPU), which a neighbour's load moves
far less than wall time. When those paired ratios spread more than ±15 %
the machine was too unsteady for a figure: speedup then reads "unsteady",
and the line under the table gives the range. Below the table: time s split
into the draft / verify / realign / other phases (the checked pass's).

With ``--sample`` both methods sample (Spec §4.3.2) and each is checked
against its per-position reference (exact = outputs identical to it); a
greedy EQSPEC row is shown beside them, and ``tok/call (α)`` is what the
recorded ``α = Σ min(p, q)`` predicts (Spec §5.4).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from ..api import generate
from ..bench.timing import paired, spread, timed
from ..stats import PHASES, Stats
from ..api import METHODS
from ..validate import validate_sampling
from . import sampled
from .common import add_pair_arguments, draft_length, load_pair, nonnegative_int, positive_int, progress
from .errors import UsageError

COLUMNS = ("exact: outputs identical to the baseline; tok/call: tokens per row per target call;\n"
           "accept: drafts accepted / drafted; target, draft: forward calls; time s: decoding (wall),\n"
           "median of the unchecked passes; check s: the checked pass's invariant checks;\n"
           "speedup: baseline / this, paired per pass, by CPU time (GPU: CUDA-event time)")

#: Half the min-max range of the paired ratios over their median above which no figure is given.
UNSTEADY = 0.15


def register(sub) -> None:
    p = sub.add_parser("demo", help="EQSPEC against the autoregressive baseline, every invariant checked after every step",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(p)
    p.add_argument("--batch-size", type=positive_int, default=4, help="rows per batch B (default %(default)s)")
    p.add_argument("-k", "--k", "--num-draft-tokens", dest="k", type=draft_length, default=4,
                   help="draft tokens per round k, or a draft policy: auto, confident (default %(default)s)")
    p.add_argument("--max-new-tokens", type=positive_int, default=48,
                   help="tokens to generate per prompt (default %(default)s)")
    p.add_argument("--prompts", type=positive_int, default=8, help="how many prompts (default %(default)s)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="prompt seed (default %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="timed passes after the checked one, methods interleaved (default %(default)s)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch CPU threads (default %(default)s: steadier on a shared machine)")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    sampled.add_arguments(p)
    p.set_defaults(func=run)


def merge(total: Stats, part: Stats) -> Stats:
    """``total`` with ``part``'s counts, records and seconds added (the demo runs a batch at a time)."""
    total.rounds += part.rounds
    total.target_calls += part.target_calls
    total.draft_calls += part.draft_calls
    total.realignments += part.realignments
    total.per_round += part.per_round
    for phase in PHASES:
        total.phase_seconds[phase] += part.phase_seconds[phase]
    total.check_seconds += part.check_seconds
    total.wall_seconds += part.wall_seconds
    total.generated_tokens += part.generated_tokens
    return total


def decode_all(pair, prompts, method, args, bar, sampling=None, check=True) -> tuple[list[list[int]], Stats]:
    """``generate`` one batch at a time (the batches ``generate`` would form itself), so the bar can move.

    ``sampling``: ``generate``'s sampling keywords with ``seed`` one per prompt,
    so that every prompt keeps its own key whichever batch it lands in.
    ``check``: every invariant after every step (the first pass), or none (a timed pass)."""
    common = dict(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                  eos_token_id=pair.eos_token_id, check_invariants=check)
    if method != "autoregressive":
        common["num_draft_tokens"] = args.k
    sequences, stats = [], Stats(method)
    starts = range(0, len(prompts), args.batch_size)
    for first in progress(starts, len(starts), f"{method:<14}", bar):
        batch = slice(first, first + args.batch_size)
        keys = {} if not sampling else {**sampling, "seed": sampling["seed"][batch]}
        result = generate(pair.target, pair.draft, prompts[batch], method=method, **common, **keys)
        sequences += result.sequences
        merge(stats, result.stats)
    return sequences, stats


def timed_passes(pair, prompts, runs, args, sampling=None) -> list[list]:
    """Per run, its ``Timing`` in each of ``args.repeats`` passes, every run
    once per pass (interleaved), unchecked. ``runs``: ``(method, sampled)``."""
    out: list[list] = [[] for _ in runs]
    for _ in range(args.repeats):
        for times, (method, sampled) in zip(out, runs):
            times.append(timed(lambda m=method, s=sampled: decode_all(pair, prompts, m, args, False,
                                                                        sampling if s else None, check=False),
                               pair.target.device)[1])
    return out


def row(method: str, stats: Stats, exact: str, times: list, base: list | None) -> dict:
    """One line of the table (and of ``--json``): counts and check seconds from
    the checked pass, times from the timed passes, the speedup paired per pass
    by the steady clock (:meth:`~batchspec.bench.timing.Timing.steady`)."""
    ratios = paired([t.steady() for t in base], [t.steady() for t in times]) if base else [1.0]
    wall = paired([t.wall for t in base], [t.wall for t in times]) if base else [1.0]
    return {"method": method, "exact": exact, "tok/call": round(stats.tokens_per_target_call, 2),
            "accept": round(stats.acceptance_rate, 3) if stats.draft_calls else "-",
            "target": stats.target_calls, "draft": stats.draft_calls,
            "time s": round(statistics.median(t.wall for t in times), 3),
            "cpu s": round(statistics.median(t.steady() for t in times), 3),
            "check s": round(stats.check_seconds, 3),
            "speedup": f"{statistics.median(ratios):.2f}x", "speedup range": [min(ratios), max(ratios)],
            "wall speedup": f"{statistics.median(wall):.2f}x", "wall speedup range": [min(wall), max(wall)],
            "steady": spread(ratios) <= UNSTEADY,
            "time s per pass": [t.wall for t in times], "cpu s per pass": [t.steady() for t in times],
            **{f"{p} s": round(stats.phase_seconds[p], 3) for p in PHASES}}


def table(rows: list[dict]) -> str:
    """The main columns right-aligned, then the phase split of ``time s``."""
    keys = ["method", "exact", "tok/call", "accept", "target", "draft", "time s", "check s", "speedup"]
    if "tok/call (α)" in rows[0]:
        keys.insert(3, "tok/call (α)")
        rows = [{**r, "tok/call (α)": "-" if r["tok/call (α)"] is None else r["tok/call (α)"]} for r in rows]
    rows = [{**r, "speedup": r["speedup"] if r["steady"] else "unsteady"} for r in rows]
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    lines = ["  ".join(k.rjust(w) for k, w in zip(keys, widths))]
    lines += ["  ".join(str(r[k]).rjust(w) for k, w in zip(keys, widths)) for r in rows]
    lines.append(COLUMNS)
    if "tok/call (α)" in keys:
        lines.append("tok/call (α): what the recorded α = Σ min(p, q) predict; AR: autoregressive; "
                     "exact: vs the reference")
    for r in rows:
        lines.append(f"  {r['method']} time s by phase: " + ", ".join(f"{p} {r[f'{p} s']}" for p in PHASES))
    return "\n".join(lines)


def sampled_rows(pair, prompts, args) -> tuple[list[dict], bool, list[list[int]]]:
    """``--sample``: (rows, all exact, EQSPEC's outputs), each sampled run
    scored against its per-position reference (Spec §5.5.1)."""
    sampling = sampled.options(args)
    sampling["seed"] = [args.sample_seed + i for i in range(len(prompts))]
    try:  # a bad --temperature / --top-k / --top-p, before any model runs
        validate_sampling("eqspec", METHODS, prompts=prompts, **sampling)
    except ValueError as error:
        raise UsageError(str(error)) from None
    bar = not args.json
    base, base_stats = decode_all(pair, prompts, "autoregressive", args, bar, sampling)
    spec, spec_stats = decode_all(pair, prompts, "eqspec", args, bar, sampling)
    _, greedy_stats = decode_all(pair, prompts, "eqspec", args, bar)
    times = timed_passes(pair, prompts, [("autoregressive", True), ("eqspec", True), ("eqspec", False)], args,
                         sampling)
    exact = True
    scores = []
    for outputs, draft in ((base, None), (spec, pair.draft)):
        ref = sampled.references(pair.target, draft, prompts, args.max_new_tokens, sampling, METHODS,
                                 pair.eos_token_id)
        hits = sum(a == b for a, b in zip(outputs, ref))
        exact &= hits == len(ref)
        scores.append(f"{hits}/{len(ref)}")
    rows = [row("AR sampled", base_stats, scores[0], times[0], None),
            row("eqspec sampled", spec_stats, scores[1], times[1], times[0]),
            row("eqspec greedy", greedy_stats, "-", times[2], times[0])]
    for r, stats in zip(rows, (base_stats, spec_stats, greedy_stats)):
        expected = stats.expected_tokens_per_target_call
        r["tok/call (α)"] = None if expected is None else round(expected, 2)
    return rows, exact, spec


def run(args) -> int:
    torch.set_num_threads(args.threads)
    pair = load_pair(args)
    prompts = pair.prompts(args.prompts, args.seed)
    if args.sample:
        rows, exact, spec = sampled_rows(pair, prompts, args)
        return show(args, pair, prompts, rows, spec, 0 if exact else 1)
    base, base_stats = decode_all(pair, prompts, "autoregressive", args, not args.json)
    spec, spec_stats = decode_all(pair, prompts, "eqspec", args, not args.json)
    exact = sum(a == b for a, b in zip(spec, base))
    times = timed_passes(pair, prompts, [("autoregressive", False), ("eqspec", False)], args)
    rows = [row("autoregressive", base_stats, "(base)", times[0], None),
            row("eqspec", spec_stats, f"{exact}/{len(prompts)}", times[1], times[0])]
    return show(args, pair, prompts, rows, spec, 0 if exact == len(prompts) else 1)


def show(args, pair, prompts, rows, spec, status: int) -> int:
    """Print the table (or ``--json``) and a few continuations; return ``status``."""
    if args.json:
        print(json.dumps({"pair": pair.name, "threads": torch.get_num_threads(), "repeats": args.repeats,
                          "clock": clock_name(pair.target.device), "rows": rows}, indent=2))
        return status
    dtype = str(pair.dtype).removeprefix("torch.")
    print(f"pair {pair.name}: {pair.description}")
    print(f"{len(prompts)} prompts, batch {args.batch_size}, k = {args.k}, {args.max_new_tokens} new tokens, "
          f"{dtype} on {args.device}, {torch.get_num_threads()} torch thread(s)")
    print(f"every invariant checked after every step in a first pass, then {args.repeats} timed passes")
    if args.sample:
        print(f"sampling: temperature {args.temperature}, top-k {args.top_k}, top-p {args.top_p}, keys from "
              f"seed {args.sample_seed}; exact = identical to each prompt's per-position reference")
    print(table(rows))
    print(steadiness(rows, clock_name(pair.target.device)))
    if pair.decode is not None:
        print()
        for prompt, out in list(zip(prompts, spec))[:3]:
            print(f"... {repr(pair.decode(prompt)[-40:])[-90:]}\n    -> {repr(pair.decode(out))[:90]}")
    return status


def clock_name(device) -> str:
    """The clock the speedup is measured by."""
    return "CUDA-event time" if device.type == "cuda" else "process CPU time"


def steadiness(rows: list[dict], clock: str) -> str:
    """Under the table: each speedup's paired range by both clocks, and a
    warning when the machine was too unsteady for a figure."""
    lines = []
    for r in rows[1:]:
        low, high = r["speedup range"]
        wall_low, wall_high = r["wall speedup range"]
        text = (f"{r['method']} speedup: {r['speedup']} by {clock} ({low:.2f}-{high:.2f}x over the passes), "
                f"{r['wall speedup']} by wall time ({wall_low:.2f}-{wall_high:.2f}x)")
        if not r["steady"]:
            text += (f"\n  too unsteady for a figure (the passes differ by over ±{UNSTEADY:.0%}): the machine's "
                     "load changed;\n  run again on a quieter machine, or with more --repeats")
        lines.append(text)
    return "\n".join(lines)
