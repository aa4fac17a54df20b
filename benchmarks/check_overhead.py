"""What checking costs: each invariant mode's time as a share of decode time.

Two parts. ``watch`` (the correctness level C1–C3, Spec §3.12, with no glue),
at batch ``--batch`` on ``--pair``, for each length of ``--max-new-tokens``
and three decoders: batchspec's EQSPEC, the outside decoder of
``batchspec.examples`` (unpad–append–repad, a few large calls a round) and
the outside decoder of ``holes_decoder.py`` (right padding, rejected drafts
kept as masked holes, ``k + 2`` one-token or ``k + 1``-token calls a round).
Each (decoder, length) is measured ``--repeat`` times, each time in a
fresh process: one unwatched run, one run inside ``watch`` with
``w.outputs``, one more unwatched run. The processes run in rounds, every
(decoder, length) once a round, so that a drift of a shared machine's speed
over the benchmark reaches every length alike (the growth from the first
length to the last compares lengths measured apart in time). In the watched
run the check time is what the hooks and ``outputs`` spend
(``Watch.check_seconds`` in wall time, ``Watch.check_cpu_seconds`` in
process CPU time), the decode time the rest of the run. Printed, each the
median over the rounds:

* ``check / decode``: the check / decode ratio, in CPU and in wall time;
* ``watched / unwatched``: the watched run over the unwatched run after it,
  minus one (``+cpu %``, ``+wall %``): what watching costs the whole
  run. It is mostly above the first figure (it is noisier), by what the
  check does to the decoder's own work, which the hooks' clocks cannot
  see: timed between the hooks, the models' forwards run a few percent
  slower in a watched run (most likely
  the processor's caches, which the hooks fill with their own data and code);
* per forward call, in CPU ms: the check, the part of it spent re-reading
  the cached columns (``re-read``: the seal's compare, the part that must
  grow with what a call attends, see
  :class:`~batchspec.invariants.hf_cache.Seal`), and the unwatched run
  (``run``: how the decoder's own cost per call grows with the length);
* the stream columns hashed per call (``hashed``: what the calls wrote, or
  every column of a call that realigned or cropped the cache, see
  :class:`~batchspec.invariants.hf_cache.Seal`): a decoder that rewrites
  its cache every round makes the check hash more a call as the cache grows;
* the peak resident memory after the watched run over that after the
  first unwatched run (the process's ``ru_maxrss``; "above base": both
  measured above the resident memory once the models are loaded).

A shared machine's wall clock wanders; the CPU figures are the ones to compare.

The peak is the process's, and glibc's allocator shapes it: by default it
raises its mmap threshold each time a large block (a growing KV cache's
old copy) is freed, so later large blocks come from the heap, which need
not shrink when they are freed, least of all under long-lived small
blocks such as the checker's.
``--mmap-threshold 131072`` runs each decoder's process with that
threshold fixed (``MALLOC_MMAP_THRESHOLD_``, for the unwatched and the
watched runs alike), so that the peak shows what the run holds.

The default pair's models were trained on 1024 positions
(``max_position_embeddings``) and its prompts are 24 to 64 tokens, so 1024
new tokens run past that: where a run needs it, this benchmark (and only
it) raises both models' ``max_position_embeddings`` to the positions the run
reaches. Their rotary embedding (RoPE, default type) is computed for any
position, so every call runs as it would below the limit; the tokens past
position 1024 are whatever the models compute there, which changes what
they are, not what checking them costs.

Then, at the first length, ``batchspec.generate(check_invariants=...)`` in
each mode (``"structural"``, ``True``: I1–I8 with provenance fingerprints,
Spec §3.6, and ``"semantic"``, a fresh forward per row, model and step):
the check time is what the driver spends in the checker
(``stats.check_seconds``, building the observation included), the decode
time what it spends in the algorithm (the phases).

    python benchmarks/check_overhead.py [--pair default|tiny-llama] [--batch 8] [--repeat 3]
        [--max-new-tokens 32,256,1024] [--mmap-threshold BYTES] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import holes_decoder  # noqa: E402
from alignment_overhead import load, pair_name  # noqa: E402
from options import lengths, non_negative, positive  # noqa: E402

import batchspec  # noqa: E402
from batchspec.examples import outside_decoder  # noqa: E402
from batchspec.invariants import watch  # noqa: E402

DECODERS = ("eqspec", "outside decoder", "holes decoder")
MODES = ("structural", True, "semantic")


def measure(target, draft, prompts, mode, repeat: int, **common) -> dict:
    """Best-of-``repeat`` decode and check seconds for one mode."""
    best = None
    for _ in range(repeat):
        stats = batchspec.generate(target, draft, prompts, check_invariants=mode, **common).stats
        decode = sum(stats.phase_seconds.values())
        if best is None or decode + stats.check_seconds < best[0] + best[1]:
            best = (decode, stats.check_seconds)
    return {"mode": "default" if mode is True else mode, "decode s": round(best[0], 3),
            "check s": round(best[1], 3), "check / decode %": round(100 * best[1] / best[0], 1)}


def _decoder(name, target, draft, prompts, k, n, eos):
    if name == "eqspec":
        return lambda: batchspec.generate(target, draft, prompts, num_draft_tokens=k, max_new_tokens=n,
                                          batch_size=len(prompts), eos_token_id=eos,
                                          check_invariants=False).sequences
    if name == "outside decoder":
        return lambda: outside_decoder.decode(target, draft, prompts, k, n)
    return lambda: holes_decoder.decode(target, draft, prompts, max(k - 1, 1), n)


def _reach(target, draft, positions: int) -> None:
    """Let both models run to ``positions`` (see the module doc: past a RoPE model's
    trained context, for this benchmark only)."""
    for model in (target, draft):
        if getattr(model.config, "max_position_embeddings", positions) < positions:
            model.config.max_position_embeddings = positions


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def watched(args, name: str, n: int) -> dict:
    """One decoder at one length, in this process: an unwatched run, then
    ``args.repeat`` watched ones (see the module doc)."""
    torch.set_num_threads(1)
    target, draft, prompts_for, eos = load(args.pair)
    prompts = prompts_for(args.batch)
    _reach(target, draft, max(map(len, prompts)) + n + args.k + 1)
    decoder = _decoder(name, target, draft, prompts, args.k, n, eos)
    base = _peak_mib()
    start = time.process_time()
    decoder()
    plain_cpu, plain_peak = time.process_time() - start, _peak_mib()
    cpu, wall, per_call, reread, hashed = [], [], [], [], []
    runs = {"watched": ([], []), "unwatched": ([], [])}  # per kind of run: (CPU s, wall s), interleaved
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        with watch(target=target, draft=draft) as w:
            out = decoder()
            w.outputs(prompts, out, max_new_tokens=n)
        total, total_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        assert not w.violations, w.report()
        runs["watched"][0].append(total_cpu)
        runs["watched"][1].append(total)
        wall.append(100 * w.check_seconds / (total - w.check_seconds))
        cpu.append(100 * w.check_cpu_seconds / (total_cpu - w.check_cpu_seconds))
        per_call.append(1000 * w.check_cpu_seconds / w.calls)
        reread.append(1000 * w.correctness.seal.reread_cpu_seconds / w.calls)
        hashed.append(w.correctness.seal.hashed_columns / w.calls)
        start, start_cpu = time.perf_counter(), time.process_time()
        decoder()
        runs["unwatched"][0].append(time.process_time() - start_cpu)
        runs["unwatched"][1].append(time.perf_counter() - start)
    whole = [100 * (statistics.median(runs["watched"][i]) / statistics.median(runs["unwatched"][i]) - 1)
             for i in (0, 1)]
    peak = _peak_mib()
    return {"decoder": name, "new tokens": n, "calls": w.calls, "unwatched cpu s": round(plain_cpu, 2),
            "check/decode cpu %": round(statistics.median(cpu), 1),
            "check/decode wall %": round(statistics.median(wall), 1),
            "whole run cpu %": round(whole[0], 1), "whole run wall %": round(whole[1], 1),
            "decode ms/call cpu": round(1000 * statistics.median(runs["unwatched"][0]) / w.calls, 3),
            "cpu % range": [round(min(cpu), 1), round(max(cpu), 1)],
            "check ms/call cpu": round(statistics.median(per_call), 3),
            "re-read ms/call cpu": round(statistics.median(reread), 3),
            "hashed columns/call": round(statistics.median(hashed), 1),
            "peak ratio": round(peak / plain_peak, 3),
            "peak ratio above base": round((peak - base) / max(plain_peak - base, 1e-9), 3),
            "peak MiB": round(peak), "unwatched peak MiB": round(plain_peak)}


def _in_child(args, name: str, n: int) -> dict:
    """:func:`watched` with one watched run, in a fresh process, so that its peak memory is its own."""
    command = [sys.executable, __file__, "--one", f"{name}:{n}", "--pair", args.pair, "--batch", str(args.batch),
               "--k", str(args.k), "--repeat", "1"]
    env = dict(os.environ)
    if args.mmap_threshold:  # glibc reads it at start-up: the child's allocator, fixed (see --mmap-threshold)
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{name} at {n} new tokens failed: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median_row(rows: list) -> dict:
    """One (decoder, length) over the rounds: each figure's median, the CPU shares' range."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (int, float)) and key not in ("new tokens", "calls"):
            out[key] = round(statistics.median(r[key] for r in rows), 3)
    shares = [r["check/decode cpu %"] for r in rows]
    out["cpu % range"] = [min(shares), max(shares)]
    return out


def _print_watch(args, rows: list) -> None:
    print(f"watch (C1-C3, no glue), pair {args.pair}, batch {args.batch}, k {args.k} (holes decoder "
          f"k {max(args.k - 1, 1)}), float32, 1 thread, median of {args.repeat} rounds of one watched run a process"
          + (f", MALLOC_MMAP_THRESHOLD_={args.mmap_threshold}" if args.mmap_threshold else ""))
    print(f"{'':>30} {'check / decode':>14}  {'watched / unwatched':>19}  {'CPU per call, ms: check':>23}")
    print(f"{'decoder':>16} {'tokens':>6} {'calls':>6}  {'cpu %':>6} {'wall %':>6}  {'+cpu %':>9} {'+wall %':>9}  "
          f"{'ms/call':>7} {'re-read':>7} {'run':>7}  {'hashed':>6}  {'peak x':>6} {'above base x':>12}")
    for r in rows:
        print(f"{r['decoder']:>16} {r['new tokens']:>6} {r['calls']:>6}  {r['check/decode cpu %']:6.1f} "
              f"{r['check/decode wall %']:6.1f}  {r['whole run cpu %']:9.1f} {r['whole run wall %']:9.1f}  "
              f"{r['check ms/call cpu']:7.3f} {r['re-read ms/call cpu']:7.3f} {r['decode ms/call cpu']:7.3f}  "
              f"{r['hashed columns/call']:6.1f}  {r['peak ratio']:6.2f} {r['peak ratio above base']:12.2f}")
    lengths = sorted({r["new tokens"] for r in rows})
    for name in DECODERS:
        per = {r["new tokens"]: (r["check ms/call cpu"], r["re-read ms/call cpu"], r["hashed columns/call"])
               for r in rows if r["decoder"] == name}
        if len(lengths) > 1 and lengths[0] in per and lengths[-1] in per:
            (first, first_reread, first_hashed), (last, last_reread, last_hashed) = per[lengths[0]], per[lengths[-1]]
            print(f"{name:>16}  ms/call at {lengths[-1]} over at {lengths[0]}: {last / first:.2f}x; "
                  f"without the re-read: {(last - last_reread) / (first - first_reread):.2f}x; "
                  f"columns hashed a call: {last_hashed / first_hashed:.2f}x")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=pair_name, default="default")
    ap.add_argument("--batch", type=positive, default=8)
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=lengths, default="32", help="comma-separated lengths, e.g. 32,256,1024")
    ap.add_argument("--repeat", type=positive, default=3)
    ap.add_argument("--decoders", default=",".join(DECODERS), help="comma-separated, of: " + ", ".join(DECODERS))
    ap.add_argument("--no-layout", action="store_true", help="skip the check_invariants modes")
    ap.add_argument("--mmap-threshold", type=non_negative, default=0, metavar="BYTES",
                    help="run each decoder's process with glibc's MALLOC_MMAP_THRESHOLD_ fixed at BYTES (e.g. "
                         "131072, its initial value): large blocks then always go back to the system when freed, "
                         "so the peak figures show what is held, not where the heap happened to grow")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # decoder:length, run in this process (a child)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.one:
        name, n = args.one.rsplit(":", 1)
        print(json.dumps(watched(args, name, int(n))))
        return
    names = [x.strip() for x in args.decoders.split(",")]
    if unknown := set(names) - set(DECODERS):
        raise SystemExit(f"unknown decoder(s) {sorted(unknown)}: use {', '.join(DECODERS)}")
    cells = [(name, n) for n in args.max_new_tokens for name in names]
    rounds = [[_in_child(args, name, n) for name, n in cells] for _ in range(args.repeat)]  # (see the module doc)
    watch_rows = [_median_row([r[i] for r in rounds]) for i in range(len(cells))]
    rows = []
    if not args.no_layout:
        torch.set_num_threads(1)
        target, draft, prompts_for, eos = load(args.pair)
        prompts = prompts_for(args.batch)
        common = dict(num_draft_tokens=args.k, max_new_tokens=args.max_new_tokens[0], batch_size=args.batch,
                      eos_token_id=eos)
        batchspec.generate(target, draft, prompts, **common)  # warm-up
        rows = [measure(target, draft, prompts, mode, args.repeat if mode != "semantic" else 1, **common)
                for mode in MODES]
    if args.json:
        print(json.dumps({"watch": watch_rows, "layout": rows}))
        return
    _print_watch(args, watch_rows)
    if rows:
        print(f"pair {args.pair}, batch {args.batch}, k {args.k}, {args.max_new_tokens[0]} new tokens, float32, "
              "1 thread")
    for r in rows:
        print(f"{r['mode']:>10}  decode {r['decode s']:7.3f} s  check {r['check s']:7.3f} s  "
              f"check/decode {r['check / decode %']:6.1f} %")


if __name__ == "__main__":
    main()
