"""What reading small calls as lists saves ``watch``: side by side in one process (Spec §3.12).

``watch`` reads a call that appends a few inputs to its model's previous
chain, or whose mask changed over a small region of an unchanged cache, as
Python lists (``invariants/small.py``; the design notes say why). This
benchmark runs each decoder of ``check_overhead.py`` at one length in one
process, watched, alternating runs with every call read as tensors
(``SMALL = 0``) and runs with the list paths on (A B, then B A, ...), and
prints per side the median check CPU time per forward call and check ÷
decode share, and the ratio lists ÷ tensors. The same process and the
alternation keep a shared machine's drift out of the ratio; the outputs and
the violations (none) are the same on both sides.

    python benchmarks/list_paths.py [--pair default] [--batch 8] [--max-new-tokens 32] [--repeat 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from alignment_overhead import load, pair_name  # noqa: E402
from check_overhead import DECODERS, _decoder, _reach  # noqa: E402

from batchspec.invariants import small, watch  # noqa: E402
from options import positive  # noqa: E402


def side_by_side(name: str, target, draft, prompts, k: int, n: int, eos, repeat: int) -> dict:
    """``{"tensors": [(ms per call, share %), ...], "lists": [...]}`` over ``repeat`` runs a side."""
    decoder, lists = _decoder(name, target, draft, prompts, k, n, eos), small.SMALL
    decoder()  # warm-up
    out: dict = {"tensors": [], "lists": []}
    try:
        for r in range(repeat):
            for side in ("tensors", "lists") if r % 2 == 0 else ("lists", "tensors"):
                small.SMALL = 0 if side == "tensors" else lists
                start = time.process_time()
                with watch(target=target, draft=draft) as w:
                    w.outputs(prompts, decoder(), max_new_tokens=n)
                total = time.process_time() - start
                assert not w.violations, w.report()
                out[side].append((1000 * w.check_cpu_seconds / w.calls,
                                  100 * w.check_cpu_seconds / (total - w.check_cpu_seconds)))
    finally:
        small.SMALL = lists
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=pair_name, default="default")
    ap.add_argument("--batch", type=positive, default=8)
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=positive, default=32)
    ap.add_argument("--repeat", type=positive, default=8, help="watched runs a side")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target, draft, prompts_for, eos = load(args.pair)
    prompts = prompts_for(args.batch)
    _reach(target, draft, max(map(len, prompts)) + args.max_new_tokens + args.k + 1)
    print(f"watch, pair {args.pair}, batch {args.batch}, k {args.k}, {args.max_new_tokens} new tokens, float32, "
          f"1 thread, {args.repeat} runs a side alternating; medians")
    print(f"{'decoder':>16}  {'tensors ms/call':>15} {'share %':>7}  {'lists ms/call':>13} {'share %':>7}  "
          f"{'lists / tensors':>15}")
    for name in DECODERS:
        runs = side_by_side(name, target, draft, prompts, args.k, args.max_new_tokens, eos, args.repeat)
        per = {side: statistics.median(r[0] for r in rows) for side, rows in runs.items()}
        share = {side: statistics.median(r[1] for r in rows) for side, rows in runs.items()}
        print(f"{name:>16}  {per['tensors']:15.3f} {share['tensors']:7.1f}  {per['lists']:13.3f} "
              f"{share['lists']:7.1f}  {per['lists'] / per['tensors']:14.2f}x")


if __name__ == "__main__":
    main()
