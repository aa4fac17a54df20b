"""What checking costs: each invariant mode's time as a share of decode time.

Two parts, on the same prompts in one run. ``watch`` (the correctness level
C1–C3, Spec §3.12, with no glue): batchspec's EQSPEC and the outside
decoder of ``batchspec.examples`` run inside ``watch`` with ``w.outputs``;
the check time is what the hooks and ``outputs`` spend
(``Watch.check_seconds``), the decode time the rest of the run, each run's
ratio taken in the same run, the median over ``--repeat`` runs printed.
Then ``batchspec.generate(check_invariants=...)`` in each mode
(``"structural"``, ``True``: I1–I8 with provenance fingerprints, Spec §3.6,
and ``"semantic"``, a fresh forward per row, model and step): the check
time is what the driver spends in the checker (``stats.check_seconds``,
building the observation included), the decode time what it spends in the
algorithm (the phases). The default mode is meant to stay within 15% of
decode time on the default pair at batch 8.

    python benchmarks/check_overhead.py [--pair default|tiny-llama] [--batch 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from alignment_overhead import load  # noqa: E402

import batchspec  # noqa: E402
from batchspec.examples import outside_decoder  # noqa: E402
from batchspec.invariants import watch  # noqa: E402

MODES = ("structural", True, "semantic")


def measure(target, draft, prompts, mode, repeat: int, **common) -> dict:
    """Best-of-``repeat`` decode and check seconds for one mode."""
    best = None
    for _ in range(repeat):
        stats = batchspec.generate(target, draft, prompts, check_invariants=mode, **common).stats
        decode = sum(stats.phase_seconds.values())
        if best is None or decode + stats.check_seconds < best[0] + best[1]:
            best = (decode, stats.check_seconds)
    return {"mode": "default" if mode is True else mode, "decode s": round(best[0], 3),
            "check s": round(best[1], 3), "check / decode %": round(100 * best[1] / best[0], 1)}


def watched(target, draft, prompts, decoder, repeat: int, k: int, n: int) -> dict:
    """Median over ``repeat`` runs of check seconds over the rest of the run, under ``watch``."""
    ratios, checks = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        with watch(target=target, draft=draft) as w:
            out = decoder()
            w.outputs(prompts, out, max_new_tokens=n)
        total = time.perf_counter() - start
        ratios.append(w.check_seconds / (total - w.check_seconds))
        checks.append(w.check_seconds)
    assert not w.violations, w.report()
    return {"check / decode % (median)": round(100 * statistics.median(ratios), 1),
            "range %": [round(100 * min(ratios), 1), round(100 * max(ratios), 1)],
            "check s (median)": round(statistics.median(checks), 3), "calls": w.calls}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target, draft, prompts_for, eos = load(args.pair)
    prompts = prompts_for(args.batch)
    common = dict(num_draft_tokens=args.k, max_new_tokens=args.max_new_tokens, batch_size=args.batch,
                  eos_token_id=eos)
    batchspec.generate(target, draft, prompts, **common)  # warm-up
    eqspec = lambda: batchspec.generate(target, draft, prompts, check_invariants=False, **common).sequences  # noqa: E731
    outside = lambda: outside_decoder.decode(target, draft, prompts, args.k, args.max_new_tokens)  # noqa: E731
    outside()
    watch_rows = {name: watched(target, draft, prompts, fn, max(args.repeat, 5), args.k, args.max_new_tokens)
                  for name, fn in (("eqspec", eqspec), ("outside decoder", outside))}
    rows = [measure(target, draft, prompts, mode, args.repeat if mode != "semantic" else 1, **common)
            for mode in MODES]
    if args.json:
        print(json.dumps({"watch": watch_rows, "layout": rows}))
        return
    print(f"watch (C1-C3, no glue), pair {args.pair}, batch {args.batch}, k {args.k}, {args.max_new_tokens} new tokens")
    for name, r in watch_rows.items():
        print(f"{name:>16}  check/decode {r['check / decode % (median)']:6.1f} %  "
              f"(range {r['range %'][0]}-{r['range %'][1]} %, {r['calls']} calls)")
    print(f"pair {args.pair}, batch {args.batch}, k {args.k}, {args.max_new_tokens} new tokens, float32, 1 thread")
    for r in rows:
        print(f"{r['mode']:>10}  decode {r['decode s']:7.3f} s  check {r['check s']:7.3f} s  "
              f"check/decode {r['check / decode %']:6.1f} %")


if __name__ == "__main__":
    main()
