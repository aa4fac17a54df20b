"""What speculative sampling costs against greedy, side by side in one run.

On one pair and one set of prompts: acceptance, mean accepted drafts,
tokens per target call (and, under sampling, what the recorded
``α = Σ min(p, q)`` predict), draft calls per round (sampling runs the
catch-up every round: Spec §4.3.2) and wall time relative to greedy.

    python benchmarks/sampling_cost.py [--pair default|tiny-llama] [--prompts 8] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import json

import torch

import batchspec
from batchspec.models.prompts import prompts_for
from batchspec.models.registry import DTYPES, PAIRS, load_pair
from options import positive

SETTINGS = {"greedy": {}, "sample t=1": dict(do_sample=True, temperature=1.0),
            "sample t=0.7": dict(do_sample=True, temperature=0.7),
            "sample t=0.7 top-p 0.9": dict(do_sample=True, temperature=0.7, top_p=0.9)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", choices=list(PAIRS), default="default")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=list(DTYPES), default=None,
                    help="default: float64 on the tiny and embedded pairs, else the pair's own")
    ap.add_argument("--prompts", type=positive, default=8)
    ap.add_argument("--max-new-tokens", type=positive, default=48)
    ap.add_argument("--batch-size", type=positive, default=4)
    ap.add_argument("-k", type=positive, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    exact = torch.float64 if PAIRS[args.pair].kind in ("tiny", "embedded") else None
    target, draft, tokenizer = load_pair(args.pair, DTYPES.get(args.dtype, exact), args.device)
    prompts = prompts_for(PAIRS[args.pair].kind, tokenizer)(args.prompts, 0)
    rows = []
    for name, sampling in SETTINGS.items():
        s = batchspec.generate(target, draft, prompts, num_draft_tokens=args.k, max_new_tokens=args.max_new_tokens,
                               batch_size=args.batch_size, **sampling).stats
        rows.append({"setting": name, "acceptance": round(s.acceptance_rate, 3),
                     "mean accepted": round(s.mean_acceptance_length, 2),
                     "tokens/target call": round(s.tokens_per_target_call, 2),
                     "expected from α": None if s.expected_tokens_per_target_call is None
                     else round(s.expected_tokens_per_target_call, 2),
                     "draft calls/round": round(s.draft_calls / s.rounds, 2),
                     "wall s": round(s.wall_seconds, 2)})
    for row in rows:
        row["wall vs greedy"] = round(row["wall s"] / rows[0]["wall s"], 2)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    print(f"pair {args.pair}, {args.prompts} prompts, batch {args.batch_size}, k = {args.k}, "
          f"{args.max_new_tokens} new tokens, {str(target.dtype).removeprefix('torch.')}, one thread")
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for r in rows:
        print("  ".join(str(r[k]).rjust(w) for k, w in zip(keys, widths)))


if __name__ == "__main__":
    main()
