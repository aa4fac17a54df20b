"""``batchspec conformance export DIR | check PATH``: test vectors for any decoder.

``export`` writes float64 tiny models (safetensors) and JSON vectors with the
reference EQSPEC's outputs and per-round a_i / L' / δ_i, and one vector per
bug class (its class and a hint in the JSON); ``check`` runs a decoder on the
vectors of a folder, or on one vector file, and prints PASS/FAIL per vector
(exit 1 if any fails): batchspec's own EQSPEC unless ``--decoder`` or
``--command`` names another. The format and the decoder protocol:
:mod:`batchspec.conformance`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shlex
import shutil
import sys
from pathlib import Path

from ..conformance.run import SIGNATURE
from .errors import UsageError

#: the decoder ``check`` runs when neither --decoder nor --command is given
REFERENCE = "batchspec.conformance.run:reference_decoder"


def load_callable(spec: str):
    """``module:function`` -> the function, or a one-line UsageError. The
    current working folder is searched first, as ``python -m`` does."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(f"--decoder must be module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"--decoder {spec}: {error}") from None
    except Exception as error:  # the module itself fails as it is imported
        raise UsageError(f"--decoder {spec}: importing {module} raised {type(error).__name__}: {error}") from None
    if not callable(function):
        raise UsageError(f"--decoder {spec}: {name} is not callable")
    try:
        inspect.signature(function).bind(*"target draft prompts k max_new_tokens eos_token_id".split())
    except TypeError as error:
        raise UsageError(f"--decoder {spec}: {error}; {SIGNATURE}") from None
    except ValueError:  # a builtin without a signature: it answers for itself
        pass
    return function


def check_command(command: str) -> None:
    """A one-line UsageError when ``command`` cannot be split or its program does not exist."""
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise UsageError(f"--command {command!r}: {error}") from None
    if not words:
        raise UsageError("--command is empty")
    if shutil.which(words[0]) is None:
        raise UsageError(f"--command: cannot run {words[0]!r} (no such program, or not executable)")


def export_main(args) -> int:
    from ..conformance import export
    from ..conformance.export import CLASSES, FAMILIES

    unknown = set(args.families) - set(FAMILIES)
    if unknown:
        raise UsageError(f"--families: unknown {sorted(unknown)}; choose from {list(FAMILIES)}")
    names = export(args.dir, args.families, () if args.no_classes else CLASSES)
    print(f"wrote {len(names)} vectors to {args.dir}: {', '.join(names)}")
    return 0


def check_main(args) -> int:
    from ..conformance import check, load_vector
    from ..conformance.run import vector_paths

    paths = vector_paths(args.dir)
    if not paths and args.dir.endswith(".json"):
        raise UsageError(f"{args.dir}: no such vector file")
    if not paths:
        raise UsageError(f"{args.dir}: no vectors (*.json); run `batchspec conformance export {args.dir}` first")
    if args.decoder is not None and args.run is not None:
        raise UsageError("give one of --decoder module:function and --command CMD, not both")
    try:
        vectors = [load_vector(path) for path in paths]
    except ValueError as error:
        raise UsageError(str(error)) from None
    unknown = sorted(set(args.vectors or ()) - {path.stem for path in paths})
    if unknown:
        raise UsageError(f"--vectors: no vector {', '.join(unknown)} in {args.dir}")
    missing = [f"{path.parent / v[role]}" for path, v in zip(paths, vectors) for role in ("target", "draft")
               if not (path.parent / v[role] / "config.json").exists()]
    if missing:
        raise UsageError(f"{missing[0]}: no model there (config.json); export the vectors again")
    if args.run is not None:
        check_command(args.run)
    decoder = None if args.run else load_callable(args.decoder or REFERENCE)
    results = check(args.dir, decoder, args.run, args.vectors, sampled=not args.greedy_only)
    for line in verdict_lines(results):
        print(line)
    failed = sum(r is not None for r in results.values())
    skipped = sum("sampling" in v and (not args.vectors or p.stem in args.vectors) for p, v in zip(paths, vectors))
    print(f"{len(results) - failed}/{len(results)} vectors pass" +
          (f" ({skipped} sampled vector{'s' * (skipped != 1)} skipped: --greedy-only)"
           if args.greedy_only and skipped else ""))
    return 1 if failed else 0


def verdict_lines(results: dict) -> list[str]:
    """PASS/FAIL per vector; a reason shared by several vectors (a decoder of the wrong
    signature fails them all alike) is printed once, on its first vector's line."""
    by_reason: dict = {}
    for name, reason in results.items():
        by_reason.setdefault(reason, []).append(name)
    lines = []
    for name, reason in results.items():
        names = by_reason[reason]
        if reason is None:
            lines.append(f"PASS {name}")
        elif name == names[0]:
            more = f" and {len(names) - 1} more vector{'s' * (len(names) > 2)}" if len(names) > 1 else ""
            lines.append(f"FAIL {name}{more}: {reason}")
    return lines


def register(subparsers) -> None:
    p = subparsers.add_parser("conformance", help="export test vectors, or check a decoder against them",
                              description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="export or check")
    e = sub.add_parser("export", help="write the vectors and their models into DIR")
    e.add_argument("dir", help="folder to write (created if missing)")
    from ..conformance.export import FAMILIES

    e.add_argument("--families", nargs="+", default=list(FAMILIES), help="tiny architectures (default: all)")
    e.add_argument("--no-classes", action="store_true", help="leave out the vectors that probe one bug class each")
    e.set_defaults(func=export_main)
    c = sub.add_parser("check", help="run a decoder on every vector in DIR (or on one vector file); "
                       "exit 1 if any fails")
    c.add_argument("dir", metavar="PATH", help="folder written by `batchspec conformance export`, "
                   "or one vector file in it")
    c.add_argument("--decoder", help=f"module:function (found from the current folder too); {SIGNATURE} "
                   f"(default: {REFERENCE}, batchspec's own EQSPEC)")
    # dest "run", not "command": args.command names the batchspec command in every error line
    c.add_argument("--command", dest="run", metavar="CMD", help="a command run as CMD VECTOR.json, printing "
                   "{\"sequences\": ...} as JSON on standard output and nothing else")
    c.add_argument("--vectors", nargs="+", help="only these vector names")
    c.add_argument("--greedy-only", action="store_true", help="skip the sampled vectors (for a decoder "
                   "that does not sample; a sampled vector passes it sampling=...)")
    c.set_defaults(func=check_main)
