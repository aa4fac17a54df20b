"""``batchspec compare``: methods × batch sizes on one model pair, the analogue of the paper's Table 1.

For every method and batch size: exact match and partial match against the
target's own batch-1 greedy output (the definition of correctness, Spec §5.2),
the first invariant violation (invariant, round) recorded on the way, tokens
committed per target call, and verified tokens thrown away. ``--json`` prints
the same rows for machines. With ``--sample`` the methods that can sample run
under speculative sampling and are scored against each prompt's per-position
reference (Spec §5.5.1) instead.

``--pair`` takes every pair of ``batchspec models list`` (:mod:`batchspec.cli.common`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch

from .. import api
from ..audit import audit
from ..invariants import InvariantViolation
from .common import add_pair_arguments, int_list, load_pair, nonnegative_int, positive_int, progress
from ..validate import validate_sampling
from . import sampled
from .errors import UsageError
from .pairs import DEFAULT_PAIR, PAIRS  # noqa: F401 (re-exported)


#: Order of the table; methods registered later (e.g. "exspec") follow.
METHOD_ORDER = ("autoregressive", "eqspec", "rollback", "masking", "dsd")


@dataclass
class Row:
    """One line of the table."""

    method: str
    batch_size: int
    exact: float  # % of prompts token-identical to the reference
    partial: float  # mean % matching prefix over reference length
    first_violation: tuple | None  # (invariant, round)
    violations: int
    tokens_per_target_call: float
    wasted_tokens: int


@torch.no_grad()
def references(target, prompts, max_new_tokens: int) -> list[list[int]]:
    """The target's batch-1 greedy continuations (``target.generate``)."""
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt], dtype=torch.long, device=target.device)
        full = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=max_new_tokens, pad_token_id=0)
        out.append(full[0, len(prompt):].tolist())
    return out


def first_semantic(target, draft, prompts, method, **options):
    """``(invariant, round)`` of the first violation in semantic mode, or None."""
    try:
        api.generate(target, draft, prompts, method=method, check_invariants="semantic", **options)
    except InvariantViolation as caught:
        return caught.invariant, caught.round
    return None


def compare(target, draft, prompts, methods, batch_sizes, k: int = 3, max_new_tokens: int = 24,
            semantic: bool = False, bar: bool = False, sampling: dict | None = None) -> list[Row]:
    """Run every method at every batch size and score it (see the module doc);
    ``bar``: a progress bar on a terminal (:func:`batchspec.cli.common.progress`);
    ``sampling``: ``generate``'s sampling keywords, for ``--sample``."""
    sampling = sampling or {}
    if sampling:  # each prompt's per-position reference, with and without a draft
        by_draft = {needs: sampled.references(target, draft if needs else None, prompts, max_new_tokens,
                                              sampling, api.METHODS) for needs in (True, False)}
    else:
        greedy = references(target, prompts, max_new_tokens)
    rows = []
    runs = [(method, batch) for method in methods for batch in batch_sizes]
    for method, batch in progress(runs, len(runs), "compare", bar):
        expected = by_draft[api.METHODS[method].needs_draft] if sampling else greedy
        options = dict(num_draft_tokens=k, max_new_tokens=max_new_tokens, batch_size=batch, **sampling)
        result = api.generate(target, draft, prompts, method=method, check_invariants="record", **options)
        first = (result.violations[0].invariant, result.violations[0].round) if result.violations else None
        if first is None and semantic:
            first = first_semantic(target, draft, prompts, method, **options)
        report = audit(prompts, expected, result.sequences)
        rows.append(Row(method, batch, 100 * report.exact_rate, 100 * report.partial_rate, first,
                        len(result.violations), result.stats.tokens_per_target_call,
                        result.stats.wasted_tokens))
    return rows


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""
    head = f"{'method':<15}{'batch':>6}{'exact %':>9}{'partial %':>11}  {'first violation':<17}" \
           f"{'tokens/target call':>19}{'wasted verified':>17}"
    lines = [head, "-" * len(head)]
    for r in rows:
        first = f"{r.first_violation[0]}, round {r.first_violation[1]}" if r.first_violation else "-"
        lines.append(f"{r.method:<15}{r.batch_size:>6}{r.exact:>9.1f}{r.partial:>11.1f}  {first:<17}"
                     f"{r.tokens_per_target_call:>19.2f}{r.wasted_tokens:>17}")
    return "\n".join(lines)


def register(subparsers) -> None:
    """Add the ``compare`` subcommand."""
    p = subparsers.add_parser("compare", help="methods x batch sizes on a model pair (paper Table 1)",
                              description=__doc__.split("\n\n")[1])
    add_pair_arguments(p)
    p.add_argument("--methods", help="comma-separated methods (default: every registered method, "
                                     f"{', '.join(ordered_methods())})")
    p.add_argument("--batch-sizes", type=int_list, default=[1, 4],
                   help="comma-separated positive batch sizes (default 1,4)")
    p.add_argument("--prompts", type=positive_int, default=8, help="number of prompts (default %(default)s)")
    p.add_argument("-k", "--num-draft-tokens", type=positive_int, default=4,
                   help="draft tokens per round k (default %(default)s)")
    p.add_argument("--max-new-tokens", type=positive_int, default=24,
                   help="tokens to generate per prompt (default %(default)s)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="prompt seed (default %(default)s)")
    p.add_argument("--semantic", action="store_true",
                   help="where the structural checks find nothing, look again with semantic I3")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sampled.add_arguments(p)
    p.set_defaults(func=main)


def ordered_methods() -> list[str]:
    """Every registered method, in table order."""
    return [m for m in METHOD_ORDER if m in api.METHODS] + sorted(set(api.METHODS) - set(METHOD_ORDER))


def parse_methods(text: str | None) -> list[str]:
    """``--methods`` as a list; a :class:`UsageError` for an empty entry or an unknown name."""
    if text is None:
        return ordered_methods()
    methods = [m.strip() for m in text.split(",")]
    unknown = [m for m in methods if m not in api.METHODS]
    if unknown:
        raise UsageError(f"--methods: unknown method(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(ordered_methods())}")
    return methods


def sampling_methods(methods: list[str], explicit: bool) -> list[str]:
    """The methods ``--sample`` runs: all that can sample; naming one that cannot is a usage error."""
    cannot = [m for m in methods if not api.METHODS[m].can_sample]
    if explicit and cannot:
        raise UsageError(f"--sample: method(s) {', '.join(cannot)} cannot sample")
    return [m for m in methods if api.METHODS[m].can_sample]


def main(args) -> int:
    """Run ``batchspec compare`` with parsed ``args``."""
    methods = parse_methods(args.methods)
    sampling = sampled.options(args)
    if sampling:
        methods = sampling_methods(methods, explicit=bool(args.methods))
        try:
            validate_sampling(methods[0], api.METHODS, prompts=[], **sampling)
        except ValueError as error:
            raise UsageError(str(error)) from None
    pair = load_pair(args)
    prompts = pair.prompts(args.prompts, args.seed)
    rows = compare(pair.target, pair.draft, prompts, methods, args.batch_sizes, args.num_draft_tokens,
                   args.max_new_tokens, args.semantic, bar=not args.json, sampling=sampling)
    settings = {"pair": args.pair, "prompts": args.prompts, "k": args.num_draft_tokens,
                "max_new_tokens": args.max_new_tokens, "seed": args.seed, "semantic": args.semantic,
                "sampling": sampling or None}
    if args.json:
        print(json.dumps({"settings": settings, "rows": [asdict(r) for r in rows]}, indent=1))
    else:
        reference = ("each prompt's per-position sampled reference" if sampling
                     else "the target's batch-1 greedy output")
        print(f"pair {args.pair} ({pair.description}); {args.prompts} prompts, k={args.num_draft_tokens}, "
              f"max_new_tokens={args.max_new_tokens}; reference: {reference}")
        print(table(rows))
    return 0
