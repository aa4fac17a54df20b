"""``batchspec conformance export DIR | check DIR``: test vectors for any decoder.

``export`` writes float64 tiny models (safetensors) and JSON vectors with the
reference EQSPEC's outputs and per-round a_i / L' / δ_i; ``check`` runs a
decoder on them and prints PASS/FAIL per vector (exit 1 if any fails). The
format and the decoder protocol: :mod:`batchspec.conformance`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .errors import UsageError


def load_callable(spec: str):
    """``module:function`` -> the function, or a one-line UsageError."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(f"--decoder must be module:function, got {spec!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"--decoder {spec}: {error}") from None


def export_main(args) -> int:
    from ..conformance import export
    from ..conformance.export import FAMILIES

    unknown = set(args.families) - set(FAMILIES)
    if unknown:
        raise UsageError(f"--families: unknown {sorted(unknown)}; choose from {list(FAMILIES)}")
    names = export(args.dir, args.families)
    print(f"wrote {len(names)} vectors to {args.dir}: {', '.join(names)}")
    return 0


def check_main(args) -> int:
    from ..conformance import check, load_vector

    folder = Path(args.dir)
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise UsageError(f"{args.dir}: no vectors (*.json); run `batchspec conformance export {args.dir}` first")
    if (args.decoder is None) == (args.run is None):
        raise UsageError("give exactly one of --decoder module:function and --command CMD")
    try:
        for path in paths:
            load_vector(path)
    except ValueError as error:
        raise UsageError(str(error)) from None
    decoder = load_callable(args.decoder) if args.decoder else None
    results = check(folder, decoder, args.run, args.vectors)
    for name, reason in results.items():
        print(f"PASS {name}" if reason is None else f"FAIL {name}: {reason}")
    failed = sum(r is not None for r in results.values())
    print(f"{len(results) - failed}/{len(results)} vectors pass")
    return 1 if failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("conformance", help="export test vectors, or check a decoder against them",
                              description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="export or check")
    e = sub.add_parser("export", help="write the vectors and their models into DIR")
    e.add_argument("dir", help="folder to write (created if missing)")
    from ..conformance.export import FAMILIES

    e.add_argument("--families", nargs="+", default=list(FAMILIES), help="tiny architectures (default: all)")
    e.set_defaults(func=export_main)
    c = sub.add_parser("check", help="run a decoder on every vector in DIR; exit 1 if any fails")
    c.add_argument("dir", help="folder written by `batchspec conformance export`")
    c.add_argument("--decoder", help="module:function, called as f(target, draft, prompts, k, "
                   "max_new_tokens, eos_token_id)")
    # dest "run", not "command": args.command names the batchspec command in every error line
    c.add_argument("--command", dest="run", metavar="CMD", help="a command run as CMD VECTOR.json, printing {\"sequences\": ...} as JSON")
    c.add_argument("--vectors", nargs="+", help="only these vector names")
    c.set_defaults(func=check_main)
