"""``batchspec audit``: tell a real bug from floating-point noise in any engine's output.

Input, JSON lines of token ids, either one file whose lines hold
``{"prompt": [...], "reference": [...], "candidate": [...]}``, or a reference
file and ``--candidate`` file whose lines hold ``{"prompt": [...], "output":
[...]}`` (matched by line). Output: a table, or with ``--json`` one JSON line
per prompt. See :mod:`batchspec.audit` for the verdicts and the tolerance.
"""

from __future__ import annotations

import json
import sys

import torch

from ..audit import ALGORITHMIC, NUMERIC, UNCLASSIFIED, audit
from .pairs import DEFAULT_PAIR, PAIRS

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def read_jsonl(path: str) -> list[dict]:
    """The JSON objects of a JSON-lines file (blank lines skipped)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_records(path: str, candidate_path: str | None):
    """``(prompts, references, candidates)`` from one or two JSON-lines files."""
    lines = read_jsonl(path)
    if candidate_path is None:
        try:
            return tuple([r[key] for r in lines] for key in ("prompt", "reference", "candidate"))
        except KeyError as missing:
            raise SystemExit(f"batchspec audit: {path}: every line needs prompt, reference and candidate "
                             f"(missing {missing}); or pass --candidate FILE") from None
    others = read_jsonl(candidate_path)
    if len(others) != len(lines):
        raise SystemExit(f"batchspec audit: {path} has {len(lines)} lines, {candidate_path} {len(others)}")
    for i, (r, c) in enumerate(zip(lines, others)):
        if r.get("prompt") != c.get("prompt"):
            raise SystemExit(f"batchspec audit: line {i + 1}: the two files have different prompts")
    return [r["prompt"] for r in lines], [r["output"] for r in lines], [c["output"] for c in others]


def load_target(args):
    """The model that computes margins, or None (``--no-model``)."""
    if args.no_model:
        return None
    if args.target:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32,
                                                     attn_implementation="sdpa")
        return model.eval()
    choice = PAIRS[args.pair]
    return choice.load(choice.dtype)[0]


def table(report) -> str:
    """Per-prompt verdicts and the totals as text."""
    head = f"{'prompt':>6}  {'exact':<5}  {'diverges at':>11}  {'partial %':>9}  {'verdict':<16}" \
           f"  {'gap':>10}  {'tolerance':>10}"
    lines = [head, "-" * len(head)]
    for p in report.prompts:
        at = "-" if p.first_divergence is None else str(p.first_divergence)
        gap = "-" if p.gap is None else f"{p.gap:.3g}"
        tol = "-" if p.tolerance is None else f"{p.tolerance:.3g}"
        verdict = p.classification or "-"
        if p.reason == "length":
            verdict += " (length)"
        lines.append(f"{p.index:>6}  {str(p.exact):<5}  {at:>11}  {100 * p.partial:>9.1f}  {verdict:<16}"
                     f"  {gap:>10}  {tol:>10}")
    c = report.counts
    lines.append(f"exact {100 * report.exact_rate:.1f}%, partial {100 * report.partial_rate:.1f}%; "
                 f"{c.get(NUMERIC, 0)} numeric near-tie, {c.get(ALGORITHMIC, 0)} algorithmic "
                 f"(dtype {report.dtype}, tolerance {report.factor:g} ulps of the logit scale)")
    return "\n".join(lines)


def register(subparsers) -> None:
    """Add the ``audit`` subcommand."""
    p = subparsers.add_parser("audit", help="compare candidate outputs with reference outputs",
                              description=__doc__.split("\n\n")[1])
    p.add_argument("input", help="JSON lines: prompt/reference/candidate, or prompt/output with --candidate")
    p.add_argument("--candidate", help="JSON lines of prompt/output, matched to INPUT by line")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--pair", choices=sorted(PAIRS), default=DEFAULT_PAIR,
                       help="target of this pair computes the margins (default %(default)s)")
    model.add_argument("--target", help="a local Hugging Face model folder computes the margins (float32)")
    model.add_argument("--no-model", action="store_true", help="no margins: divergences stay unclassified, and any divergence exits 1")
    p.add_argument("--dtype", choices=sorted(DTYPES),
                   help="precision the outputs were produced in (default: the margin model's)")
    p.add_argument("--factor", type=float, default=None,
                   help="tolerance in ulps of the logit scale (default 16)")
    p.add_argument("--json", action="store_true", help="one JSON line per prompt instead of a table")
    p.set_defaults(func=main)


def main(args) -> int:
    """Run ``batchspec audit`` with parsed ``args``; exit status 1 when any divergence is
    algorithmic, or, with ``--no-model``, when any output differs at all (unclassified)."""
    prompts, references, candidates = load_records(args.input, args.candidate)
    target = load_target(args)
    options = {} if args.factor is None else {"factor": args.factor}
    report = audit(prompts, references, candidates, target, DTYPES.get(args.dtype), **options)
    if args.json:
        for p in report.as_dict()["prompts"]:
            sys.stdout.write(json.dumps(p) + "\n")
    else:
        print(table(report))
    return 1 if report.counts.get(ALGORITHMIC) or report.counts.get(UNCLASSIFIED) else 0
