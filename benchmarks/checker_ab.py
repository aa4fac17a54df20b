"""What a change to the checker costs or saves: ``watch`` of two revisions side by side in one process (Spec §3.12).

The checker of another git revision (``--base``, default ``HEAD``: the
working tree against its last commit) is extracted from the repository
(``git archive <rev> invariants``) into a temporary folder and imported
under another package name, next to the working tree's
``batchspec.invariants``; ``invariants/`` imports nothing of batchspec's
outside itself, so both run on the same models in the same process. Each
decoder of ``check_overhead.py`` runs at one length, watched, alternating
the two checkers (base then working tree, then the other way round, ...),
and per side the check's process CPU time per forward call and its share
of the decode time are printed (medians, and the mean of the lowest
quarter of the runs), then the working tree over the base per pair of runs
(median and quartiles). The same process and the alternation keep a shared
machine's drift out of the ratio, which fresh processes measured hours
apart cannot; a difference of a few percent still needs some forty runs a
side to stand out of the spread the quartiles show. Both sides must find
no violation.

    python benchmarks/checker_ab.py [--base REV] [--decoders eqspec] [--max-new-tokens 32] [--repeat 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from alignment_overhead import load, pair_name  # noqa: E402
from check_overhead import DECODERS, _decoder, _reach  # noqa: E402
from options import positive  # noqa: E402

import batchspec.invariants as working  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def checker_at(rev: str, folder: Path):
    """The ``invariants`` package of git revision ``rev``, imported as ``base_invariants``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "invariants"], capture_output=True)
    if archive.returncode:
        raise SystemExit(f"git archive {rev} invariants: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    path = folder / "invariants"
    spec = importlib.util.spec_from_file_location("base_invariants", path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["base_invariants"] = module
    spec.loader.exec_module(module)
    return module


def side_by_side(checkers: dict, decoder, target, draft, prompts, n: int, repeat: int) -> dict:
    """Per side, ``[(check ms per call, share %), ...]`` over ``repeat`` alternating runs."""
    decoder()  # warm-up
    out: dict = {side: [] for side in checkers}
    sides = list(checkers)
    for r in range(repeat):
        for side in sides if r % 2 == 0 else sides[::-1]:
            start = time.process_time()
            with checkers[side].watch(target=target, draft=draft) as w:
                w.outputs(prompts, decoder(), max_new_tokens=n)
            total = time.process_time() - start
            if w.violations:
                raise SystemExit(f"the {side} checker found violations:\n{w.report()}")
            out[side].append((1000 * w.check_cpu_seconds / w.calls,
                              100 * w.check_cpu_seconds / (total - w.check_cpu_seconds)))
    return out


def _lowest_quarter(values: list) -> float:
    low = sorted(values)[:max(1, len(values) // 4)]
    return sum(low) / len(low)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD", help="the git revision whose checker the working tree's is compared with")
    ap.add_argument("--decoders", default="eqspec", help="comma-separated, of: " + ", ".join(DECODERS))
    ap.add_argument("--pair", type=pair_name, default="default")
    ap.add_argument("--batch", type=positive, default=8)
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=positive, default=32)
    ap.add_argument("--repeat", type=positive, default=40, help="watched runs a side")
    args = ap.parse_args(argv)
    names = [x.strip() for x in args.decoders.split(",")]
    if unknown := set(names) - set(DECODERS):
        raise SystemExit(f"unknown decoder(s) {sorted(unknown)}: use {', '.join(DECODERS)}")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        # the revision first: a bad --base is named before a model loads
        checkers = {"base": checker_at(args.base, Path(folder)), "working tree": working}
        target, draft, prompts_for, eos = load(args.pair)
        prompts = prompts_for(args.batch)
        _reach(target, draft, max(map(len, prompts)) + args.max_new_tokens + args.k + 1)
        print(f"watch at {args.base} (base) and in the working tree, pair {args.pair}, batch {args.batch}, "
              f"k {args.k}, {args.max_new_tokens} new tokens, float32, 1 thread, {args.repeat} runs a side "
              "alternating; check CPU ms per call and share of decode: medians (lowest quarter's mean)")
        for name in names:
            decoder = _decoder(name, target, draft, prompts, args.k, args.max_new_tokens, eos)
            runs = side_by_side(checkers, decoder, target, draft, prompts, args.max_new_tokens, args.repeat)
            cells = []
            for side, rows in runs.items():
                per, share = [r[0] for r in rows], [r[1] for r in rows]
                cells.append(f"{side} {statistics.median(per):.3f} ({_lowest_quarter(per):.3f}) ms, "
                             f"{statistics.median(share):.2f}%")
            ratios = [w[0] / b[0] for b, w in zip(runs["base"], runs["working tree"])]
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            print(f"{name:>16}  " + "; ".join(cells) + f"; working tree / base: {statistics.median(ratios):.3f} "
                  f"(quartiles {quartiles[0]:.3f} .. {quartiles[2]:.3f})")


if __name__ == "__main__":
    main()
