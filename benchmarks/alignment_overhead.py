"""What synchronisation costs: EQSPEC's alignment share of decoding time by batch size.

The paper measures alignment overhead growing with batch size, from ~13% of
decoding time at batch 1 to ~40% at batch 32 (Paper §3). This prints the
same breakdown for our implementation, measured side by side in one run with
the autoregressive baseline (tokens/s and the speedup over it).

    python benchmarks/alignment_overhead.py [--pair default|tiny-llama] [--batch-sizes 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import json

import torch

import batchspec
from batchspec.testing import random_prompts
from options import positive


def pair_name(text: str) -> str:
    """argparse type for ``--pair``: a name :func:`load` knows, refused before any model loads."""
    from batchspec.models import tiny

    if text == "default" or (text.startswith("tiny-") and text[5:] in tiny.FAMILIES):
        return text
    raise argparse.ArgumentTypeError(f"unknown pair {text!r}: use default or tiny-<family>, <family> one of "
                                     f"{', '.join(sorted(tiny.FAMILIES))}")


def load(name: str):
    """``(target, draft, prompts_for(n), eos)`` for a pair name, in float32."""
    if name.startswith("tiny-"):
        from batchspec.models import tiny

        target, draft = tiny.pair(name[5:], "perturbed", dtype=torch.float32)
        return target, draft, lambda n: random_prompts(seed=5, count=n, low=4, high=48), None
    if name == "default":
        from batchspec.demo_pair import demo_pair, demo_prompts

        pair = demo_pair(1, torch.float32)
        return pair.target, pair.draft, demo_prompts, pair.eos_token_id
    raise SystemExit(f"unknown pair {name!r}: use tiny-<family> or default")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=pair_name, default="default")
    ap.add_argument("--batch-sizes", type=positive, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=positive, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    target, draft, prompts_for, eos = load(args.pair)
    rows = []
    for b in args.batch_sizes:
        prompts = prompts_for(max(2 * b, 4))
        common = dict(max_new_tokens=args.max_new_tokens, batch_size=b, eos_token_id=eos)
        ar = batchspec.generate(target, None, prompts, method="autoregressive", **common)
        eq = batchspec.generate(target, draft, prompts, method="eqspec", num_draft_tokens=args.k, **common)
        s = eq.stats
        decode_time = sum(s.phase_seconds.values())
        rows.append({
            "batch": b, "realign %": round(100 * s.phase_seconds["realign"] / decode_time, 1),
            "realigned rounds %": round(100 * s.realignments / max(s.rounds, 1), 1),
            "tokens/target call": round(s.tokens_per_target_call, 2),
            "eqspec tok/s": round(s.generated_tokens / s.wall_seconds, 1),
            "AR tok/s": round(ar.stats.generated_tokens / ar.stats.wall_seconds, 1),
            "speedup": round(ar.stats.wall_seconds / s.wall_seconds, 2),
            "exact": sum(x == y for x, y in zip(eq.sequences, ar.sequences)) / len(prompts),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    keys = list(rows[0])
    print(f"pair {args.pair}, k = {args.k}, {args.max_new_tokens} new tokens, float32, "
          f"{torch.get_num_threads()} threads")
    print("  ".join(f"{k:>18}" for k in keys))
    for r in rows:
        print("  ".join(f"{r[k]!s:>18}" for k in keys))


if __name__ == "__main__":
    main()
