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

from ..audit import ALGORITHMIC, NUMERIC, UNCLASSIFIED, audit, check_ids
from .common import DTYPES, add_pair_arguments, check_device, load_pair, positive_float
from .errors import UsageError


def read_jsonl(path: str) -> list[dict]:
    """The JSON objects of a JSON-lines file (blank lines skipped); a
    :class:`UsageError` naming the file and line for anything else."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise UsageError(f"{path}: cannot read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}, line {number}: not JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise UsageError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
        records.append((number, record))
    if not records:
        raise UsageError(f"{path}: no records (an empty audit would pass on nothing)")
    return records


def field(path: str, number: int, record: dict, key: str) -> list[int]:
    """``record[key]``, a list of token ids, or a :class:`UsageError` naming file, line and key."""
    if key not in record:
        raise UsageError(f"{path}, line {number}: missing {key!r} (keys: {', '.join(record) or 'none'})")
    ids = record[key]
    if not isinstance(ids, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
        raise UsageError(f"{path}, line {number}: {key!r} must be a list of integer token ids, got {ids!r:.60}")
    return ids


def load_records(path: str, candidate_path: str | None):
    """``(prompts, references, candidates)`` from one or two JSON-lines files."""
    lines = read_jsonl(path)
    if candidate_path is None:
        if "output" in lines[0][1] and "candidate" not in lines[0][1]:
            raise UsageError(f"{path}: lines hold 'output', not 'reference' and 'candidate'; "
                             f"pass the other engine's file with --candidate FILE")
        return tuple([field(path, n, r, key) for n, r in lines] for key in ("prompt", "reference", "candidate"))
    others = read_jsonl(candidate_path)
    if len(others) != len(lines):
        raise UsageError(f"{path} has {len(lines)} records, {candidate_path} {len(others)}")
    for (n, r), (m, c) in zip(lines, others):
        if field(path, n, r, "prompt") != field(candidate_path, m, c, "prompt"):
            raise UsageError(f"{path} line {n} and {candidate_path} line {m}: different prompts")
    return ([field(path, n, r, "prompt") for n, r in lines], [field(path, n, r, "output") for n, r in lines],
            [field(candidate_path, m, c, "output") for m, c in others])


def load_target(args):
    """The model that computes margins, or None (``--no-model``)."""
    if args.no_model:
        return None
    if args.target:
        from transformers import AutoModelForCausalLM

        device = check_device(args.device)
        try:
            model = AutoModelForCausalLM.from_pretrained(args.target, dtype=DTYPES[args.dtype or "float32"],
                                                         attn_implementation="sdpa", local_files_only=True)
        except (OSError, ValueError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UsageError(f"--target {args.target}: cannot load a causal LM from it ({first})") from None
        return model.to(device).eval()
    return load_pair(args).target


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
                 f"{c.get(NUMERIC, 0)} numeric near-tie, {c.get(ALGORITHMIC, 0)} algorithmic, "
                 f"{c.get(UNCLASSIFIED, 0)} unclassified")
    lines.append(f"(dtype {report.dtype}, tolerance {report.factor:g} ulps of the logit scale; "
                 f"unclassified = no model gave margins, counted as failures)")
    return "\n".join(lines)


def register(subparsers) -> None:
    """Add the ``audit`` subcommand."""
    p = subparsers.add_parser("audit", help="compare candidate outputs with reference outputs",
                              description=__doc__.split("\n\n")[1])
    p.add_argument("input", help="JSON lines: prompt/reference/candidate, or prompt/output with --candidate")
    p.add_argument("--candidate", help="JSON lines of prompt/output, matched to INPUT by line")
    add_pair_arguments(p)  # the pair's target computes the margins at each divergence
    model = p.add_mutually_exclusive_group()
    model.add_argument("--target", help="a local Hugging Face model folder computes the margins instead "
                                        "(default dtype float32)")
    model.add_argument("--no-model", action="store_true",
                       help="no margins: divergences stay unclassified (and still fail, exit 1)")
    p.add_argument("--outputs-dtype", choices=list(DTYPES),
                   help="precision the outputs were produced in (default: the margin model's dtype)")
    p.add_argument("--factor", type=positive_float, default=None,
                   help="tolerance in ulps of the logit scale (default 16)")
    p.add_argument("--json", action="store_true", help="one JSON line per prompt instead of a table")
    p.set_defaults(func=main)


def main(args) -> int:
    """Run ``batchspec audit`` with parsed ``args``. Exit status 1 when any
    divergence is algorithmic or, without a model, unclassified: a CI job
    must not pass on outputs that differ."""
    prompts, references, candidates = load_records(args.input, args.candidate)
    target = load_target(args)
    try:
        check_ids(prompts, references, candidates, target)
    except ValueError as error:
        raise UsageError(str(error)) from None
    options = {} if args.factor is None else {"factor": args.factor}
    outputs = DTYPES.get(args.outputs_dtype) if args.outputs_dtype else None
    report = audit(prompts, references, candidates, target, outputs, **options)
    if args.json:
        for p in report.as_dict()["prompts"]:
            sys.stdout.write(json.dumps(p) + "\n")
    else:
        print(table(report))
    return 1 if report.counts.get(ALGORITHMIC) or report.counts.get(UNCLASSIFIED) else 0
