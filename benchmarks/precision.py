"""Exact-match rates of EQSPEC and EXSPEC in float16, bfloat16 and float32,
with the auditor's label (``batchspec.audit``) for every mismatch.

The reference is the target's own batch-1 greedy ``generate`` in the same
precision; a mismatch is labelled "numeric near-tie" (rounding in that
precision can pick either token) or "algorithmic" (a bug) by the target in
float32 at the divergence. Lower precisions are measured and reported here,
never asserted token for token (the tests do exactness in float64).

    python benchmarks/precision.py --device cuda --pairs default,tiny-llama --json out.json
"""

from __future__ import annotations

import argparse
import json

import torch

import batchspec
from batchspec.audit import audit
from batchspec.models.prompts import default_prompts, tiny_prompts
from batchspec.models.registry import load_pair
from batchspec.testing import reference_greedy
from options import positive

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def load(name: str, dtype, device):
    target, draft, _ = load_pair(name, dtype=dtype, device=device)
    return target, draft


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", default="default,tiny-llama,tiny-qwen3,tiny-glm4")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtypes", default="float16,bfloat16,float32")
    ap.add_argument("--prompts", type=positive, default=16)
    ap.add_argument("--batch-size", type=positive, default=8)
    ap.add_argument("--max-new-tokens", type=positive, default=32)
    ap.add_argument("-k", type=positive, default=4)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    for name in args.pairs.split(","):
        prompts = (default_prompts if name == "default" else tiny_prompts)(args.prompts, 0)
        judge, _ = load(name, torch.float32, args.device)
        for dtype_name in args.dtypes.split(","):
            target, draft = load(name, DTYPES[dtype_name], args.device)
            refs = [reference_greedy(target, p, args.max_new_tokens) for p in prompts]
            for method in ("eqspec", "exspec"):
                out = batchspec.generate(target, draft, prompts, method=method, num_draft_tokens=args.k,
                                         max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
                report = audit(prompts, refs, out.sequences, target=judge, dtype=DTYPES[dtype_name])
                rows.append({"pair": name, "dtype": dtype_name, "method": method,
                             "exact": f"{sum(p.exact for p in report.prompts)}/{len(prompts)}",
                             "labels": report.counts,
                             "mismatches": [{"prompt": p.index, "at": p.first_divergence, "label": p.classification}
                                            for p in report.prompts if not p.exact]})
                print(f"{name:>11} {dtype_name:>9} {method:>7}  exact {rows[-1]['exact']:>6}  {report.counts}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "rows": rows, "argv": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
