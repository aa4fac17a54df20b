"""``batchspec demo``: EQSPEC against the autoregressive baseline, invariants on.

With ``--sample`` both sample (Spec §4.3.2) and each is checked against its
per-position reference; a greedy EQSPEC row is shown beside them."""

from __future__ import annotations

import json

import torch

from ..api import METHODS, generate
from ..demo_pair import demo_pair
from . import sampled
from .errors import UsageError


def register(sub) -> None:
    p = sub.add_parser("demo", help="run EQSPEC and the autoregressive baseline on the default pair")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--k", type=int, default=4, help="num_draft_tokens")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--prompts", type=int, default=8, help="how many prompts")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    sampled.add_arguments(p)
    p.set_defaults(func=run)


def _sampled_rows(args, pair, common):
    """``--sample``: (rows, exact) with every sampled run scored against its per-position reference."""
    sampling = sampled.options(args)
    try:
        generate(pair.target, pair.draft, [[0]], max_new_tokens=0, **sampling)
    except ValueError as error:  # a bad --temperature / --top-k / --top-p, before any model runs
        raise UsageError(str(error)) from None
    runs = [("autoregressive (sampled)", generate(pair.target, None, pair.prompts, method="autoregressive",
                                                  **common, **sampling), None),
            ("eqspec (sampled)", generate(pair.target, pair.draft, pair.prompts, method="eqspec",
                                          num_draft_tokens=args.k, **common, **sampling), pair.draft),
            ("eqspec (greedy)", generate(pair.target, pair.draft, pair.prompts, method="eqspec",
                                         num_draft_tokens=args.k, **common), "greedy")]
    rows, exact = [], True
    for name, res, draft in runs:
        if draft == "greedy":
            score = "-"
        else:
            ref = sampled.references(pair.target, draft, pair.prompts, args.max_new_tokens, sampling, METHODS,
                                     pair.eos_token_id)
            hits = sum(a == b for a, b in zip(res.sequences, ref))
            exact &= hits == len(ref)
            score = f"{hits}/{len(ref)}"
        expected = res.stats.expected_tokens_per_target_call
        rows.append(_row(name, res, score, "eqspec" in name,
                         {"expected tokens/call (α)": None if expected is None else round(expected, 2)}))
    return rows, exact, runs[1][1]


def _row(name, res, score, speculative, extra=None) -> dict:
    s = res.stats
    return {"method": name, "exact vs reference": score, "tokens/target call": round(s.tokens_per_target_call, 2),
            **(extra or {}), "acceptance": round(s.acceptance_rate, 3) if speculative else None,
            "target calls": s.target_calls, "draft calls": s.draft_calls,
            **{f"{p} s": round(v, 3) for p, v in s.phase_seconds.items()},
            "wall s": round(s.wall_seconds, 3), "check s": round(s.check_seconds, 3)}


def run(args) -> int:
    pair = demo_pair(args.prompts, getattr(torch, args.dtype))
    common = dict(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                  eos_token_id=pair.eos_token_id, check_invariants=True)
    if args.sample:
        rows, exact, spec = _sampled_rows(args, pair, common)
        return _print(args, pair, rows, spec, exact)
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
    return _print(args, pair, rows, spec, exact == len(pair.prompts))


def _print(args, pair, rows, spec, exact: bool) -> int:
    if args.json:
        print(json.dumps({"pair": pair.name, "rows": rows}, indent=2))
        return 0 if exact else 1
    print(f"pair: {pair.name}")
    mode = (f"sampling at temperature {args.temperature}, top-k {args.top_k}, top-p {args.top_p}, "
            f"seed {args.sample_seed}; " if args.sample else "")
    print(f"{len(pair.prompts)} prompts, batch {args.batch_size}, k = {args.k}, {args.max_new_tokens} new tokens, "
          f"{args.dtype}; {mode}every invariant checked after every step")
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for r in rows:
        print("  ".join(str(r[k]).rjust(w) for k, w in zip(keys, widths)))
    if pair.decode is not None:
        print()
        for prompt, out in list(zip(pair.prompts, spec.sequences))[:3]:
            print(f"... {pair.decode(prompt)[-40:]!r}\n    -> {pair.decode(out)!r}")
    return 0 if exact else 1
