"""EXSPEC against EQSPEC, timed in pairs: the case EXSPEC exists for.

More prompts than the batch (``--prompts-per-batch``, default 4), on the
default pair (float32, one thread, EOS-driven output lengths), with varied
prompt lengths (24 to 96 bytes, the demo's) or equal ones (48 bytes each).
Each pair runs EQSPEC and then EXSPEC on the same prompts, their order
alternating from pair to pair, and the figure is the median over pairs of
EQSPEC's time over EXSPEC's (> 1: EXSPEC is faster), with its range. On a
shared machine two runs a minute apart can differ by 20%; a ratio taken
within a pair, of two runs seconds apart, cancels most of that. Both
outputs are checked token for token against each other (both are checked
against the batch-1 reference by the test suite and by ``batchspec bench``).

    python benchmarks/exspec_vs_eqspec.py [--batch-sizes 8 32] [--pairs 7] [--prompts equal]
        [--k 4] [--max-new-tokens 48] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import batchspec
from batchspec.demo_pair import demo_pair, demo_prompts
from batchspec.models.default_pair import held_out_sample
from options import positive


def prompts(kind: str, count: int) -> list[list[int]]:
    """``count`` held-out stdlib prompts: the demo's varied ones, or 48 bytes each."""
    if kind == "varied":
        return demo_prompts(count)
    windows = held_out_sample()  # [64, 256]
    return [windows[i % windows.shape[0]][(i // windows.shape[0]) * 48:][:48].tolist() for i in range(count)]


def timed(pair, batch, method, k, n, b):
    start = time.perf_counter()
    out = batchspec.generate(pair.target, pair.draft, batch, method=method, num_draft_tokens=k,
                             max_new_tokens=n, batch_size=b, eos_token_id=pair.eos_token_id)
    return time.perf_counter() - start, out.sequences


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=positive, nargs="+", default=[8, 32])
    ap.add_argument("--pairs", type=positive, default=7)
    ap.add_argument("--prompts", choices=["varied", "equal"], default="varied")
    ap.add_argument("--prompts-per-batch", type=positive, default=4)
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=positive, default=48)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    pair = demo_pair(1, torch.float32)
    rows = []
    for b in args.batch_sizes:
        batch = prompts(args.prompts, args.prompts_per_batch * b)
        timed(pair, batch, "eqspec", args.k, args.max_new_tokens, b)  # warm-up, untimed
        ratios, same = [], True
        for i in range(args.pairs):
            order = ("eqspec", "exspec") if i % 2 == 0 else ("exspec", "eqspec")
            runs = {m: timed(pair, batch, m, args.k, args.max_new_tokens, b) for m in order}
            ratios.append(runs["eqspec"][0] / runs["exspec"][0])
            same &= runs["eqspec"][1] == runs["exspec"][1]
        rows.append({"batch": b, "prompts": f"{len(batch)} {args.prompts}", "pairs": args.pairs,
                     "eqspec/exspec median": round(statistics.median(ratios), 3),
                     "min": round(min(ratios), 3), "max": round(max(ratios), 3), "same output": same})
        if not same:
            raise SystemExit(f"batch {b}: EXSPEC's output differs from EQSPEC's")
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print("  ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
