"""``batchspec demo``: EQSPEC against the autoregressive baseline, invariants on."""

from __future__ import annotations

import json

import torch

from ..api import generate
from ..demo_pair import demo_pair


def register(sub) -> None:
    p = sub.add_parser("demo", help="run EQSPEC and the autoregressive baseline on the default pair")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--k", type=int, default=4, help="num_draft_tokens")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--prompts", type=int, default=8, help="how many prompts")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    pair = demo_pair(args.prompts, getattr(torch, args.dtype))
    common = dict(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                  eos_token_id=pair.eos_token_id, check_invariants=True)
    base = generate(pair.target, None, pair.prompts, method="autoregressive", **common)
    spec = generate(pair.target, pair.draft, pair.prompts, method="eqspec", num_draft_tokens=args.k, **common)
    exact = sum(a == b for a, b in zip(spec.sequences, base.sequences))
    rows = []
    for name, res in (("autoregressive", base), ("eqspec", spec)):
        s = res.stats
        rows.append({
            "method": name, "exact vs baseline": f"{exact}/{len(pair.prompts)}" if name == "eqspec" else "(baseline)",
            "tokens/target call": round(s.tokens_per_target_call, 2),
            "acceptance": round(s.acceptance_rate, 3) if name == "eqspec" else None,
            "target calls": s.target_calls, "draft calls": s.draft_calls,
            **{f"{p} s": round(v, 3) for p, v in s.phase_seconds.items()},
            "wall s": round(s.wall_seconds, 3), "check s": round(s.check_seconds, 3),
        })
    if args.json:
        print(json.dumps({"pair": pair.name, "rows": rows}, indent=2))
        return 0 if exact == len(pair.prompts) else 1
    print(f"pair: {pair.name}")
    print(f"{len(pair.prompts)} prompts, batch {args.batch_size}, k = {args.k}, {args.max_new_tokens} new tokens, "
          f"{args.dtype}; every invariant checked after every step")
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for r in rows:
        print("  ".join(str(r[k]).rjust(w) for k, w in zip(keys, widths)))
    if pair.decode is not None:
        print()
        for prompt, out in list(zip(pair.prompts, spec.sequences))[:3]:
            print(f"... {pair.decode(prompt)[-40:]!r}\n    -> {pair.decode(out)!r}")
    return 0 if exact == len(pair.prompts) else 1
