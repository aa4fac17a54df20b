"""``watch`` on a real pair: transformers' decoding paths and three speculative decoders, each run plain and watched.

The tests run ``watch`` on tiny models of six architectures (Spec §3.12); this
runs it on a real one, the fetched Qwen2.5-Coder pair (1.5B target, 0.5B
draft, float32; ``batchspec models fetch qwen2.5-coder``), over the code
prompts the real-pair pages use, each path once unwatched and once inside
``watch`` with ``w.outputs``:

* transformers' batched ``generate`` (left padding) with its dynamic cache and
  with ``cache_implementation="static"``;
* transformers' assisted generation at batch 1 (its only batch size), with the
  0.5B model as draft, and with prompt lookup (``prompt_lookup_num_tokens=3``),
  one prompt at a time;
* batchspec's EQSPEC, the outside decoder of ``batchspec.examples``
  (unpad–append–repad) and the one of ``holes_decoder.py`` (right padding,
  rejected drafts kept as masked holes).

Per path it prints the forward calls watched, whether the watched output is the
unwatched one, whether it is each prompt's own batch-1 greedy continuation
(``generate`` on that prompt alone; float32, so measured, not asserted), the
violations found (a correct decoder has none), and what the check cost: its
process CPU time over the rest of the run's, and the same in wall time, and
per call. Outputs are cut at the first EOS (the outside decoders run past it).

    python benchmarks/watch_real_pair.py [--pair qwen2.5-coder] [--batch 4] [--max-new-tokens 32]
        [--threads 2] [--paths generate,static,assisted,lookup,eqspec,outside,holes]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import holes_decoder  # noqa: E402

import batchspec  # noqa: E402
from batchspec.examples import outside_decoder  # noqa: E402
from batchspec.invariants import watch  # noqa: E402
from batchspec.models import registry  # noqa: E402
from batchspec.viz.setup import prompts_for  # noqa: E402
from options import positive, token_ids  # noqa: E402

PATHS = ("generate", "static", "assisted", "lookup", "eqspec", "outside", "holes")


def _ids(value) -> list[int]:
    return [] if value is None else [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def cut(rows: list, eos: list[int]) -> list:
    """Each row up to and including its first EOS."""
    return [next((row[: j + 1] for j, t in enumerate(row) if t in eos), row) for row in rows]


@torch.no_grad()
def hf_generate(model, prompts, n, pad, eos, **extra) -> list:
    """``model.generate`` on left-padded ``prompts``: the new tokens of each row, cut at its first EOS."""
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad,
                         eos_token_id=eos, **extra)
    return cut(out[:, width:].tolist(), eos)


def decoders(target, draft, n, k, pad, eos) -> dict:
    """``path -> (models to watch, decode(prompts) -> new tokens per prompt)``."""
    singly = lambda **extra: lambda ps: [hf_generate(target, [p], n, pad, eos, **extra)[0] for p in ps]  # noqa: E731
    return {
        "generate": (dict(target=target), lambda ps: hf_generate(target, ps, n, pad, eos)),
        "static": (dict(target=target), lambda ps: hf_generate(target, ps, n, pad, eos, cache_implementation="static")),
        "assisted": (dict(target=target, draft=draft), singly(assistant_model=draft)),
        "lookup": (dict(target=target), singly(prompt_lookup_num_tokens=3)),
        "eqspec": (dict(target=target, draft=draft), lambda ps: cut(batchspec.generate(
            target, draft, ps, num_draft_tokens=k, max_new_tokens=n, batch_size=len(ps), eos_token_id=eos,
            check_invariants=False).sequences, eos)),
        "outside": (dict(target=target, draft=draft),
                    lambda ps: cut(outside_decoder.decode(target, draft, ps, k, n), eos)),
        "holes": (dict(target=target, draft=draft),
                  lambda ps: cut(holes_decoder.decode(target, draft, ps, max(k - 1, 1), n), eos)),
    }


def run(path, models, decode, prompts, n, eos, reference) -> dict:
    """One path, unwatched then watched."""
    start = time.process_time()
    plain = decode(prompts)
    plain_cpu = time.process_time() - start
    start, start_cpu = time.perf_counter(), time.process_time()
    with watch(check="record", **models) as w:
        got = decode(prompts)
        w.outputs(prompts, got, max_new_tokens=n, eos_token_id=eos)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return {"path": path, "calls": w.calls, "same as unwatched": got == plain,
            "batch-1 greedy": sum(g == r for g, r in zip(got, reference)), "prompts": len(prompts),
            "violations": len(w.violations), "first": w.violations[0].detail[:160] if w.violations else "",
            "check cpu %": 100 * w.check_cpu_seconds / (cpu - w.check_cpu_seconds),
            "check wall %": 100 * w.check_seconds / (wall - w.check_seconds),
            "ms/call": 1000 * w.check_cpu_seconds / max(w.calls, 1),
            "decode cpu s": plain_cpu}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="qwen2.5-coder")
    ap.add_argument("--batch", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=positive, default=32)
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--threads", type=positive, default=2)
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated, of: " + ", ".join(PATHS))
    ap.add_argument("--eos", type=token_ids, help="comma-separated EOS ids (default: the target's generation config's)")
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",")]
    if unknown := set(paths) - set(PATHS):
        raise SystemExit(f"unknown path(s) {sorted(unknown)}: use {', '.join(PATHS)}")
    available, reason = registry.availability(args.pair)
    if not available:
        raise SystemExit(f"pair {args.pair!r} is not available here: {reason}")
    torch.set_num_threads(args.threads)
    target, draft, tokenizer = registry.load_pair(args.pair, torch.float32)
    eos = args.eos if args.eos else \
        _ids(target.generation_config.eos_token_id) or _ids(target.config.eos_token_id)
    pad = next((p for p in (getattr(tokenizer, "pad_token_id", None), target.generation_config.pad_token_id,
                            target.config.pad_token_id, *eos) if p is not None), 0)
    prompts = prompts_for(args.pair, args.batch, tokenizer=tokenizer)
    n = args.max_new_tokens
    reference = [hf_generate(target, [p], n, pad, eos)[0] for p in prompts]  # each prompt alone
    print(f"watch on {args.pair}, float32, {args.threads} threads, batch {args.batch} (assisted and lookup: "
          f"one prompt at a time), {n} new tokens, k {args.k} (holes decoder k {max(args.k - 1, 1)}), "
          f"EOS {eos}, pad {pad}")
    print(f"{'path':>9} {'calls':>5} {'same':>5} {'greedy':>7} {'violations':>10}  {'cpu %':>6} {'wall %':>6} "
          f"{'ms/call':>7} {'decode s':>8}")
    table = decoders(target, draft, n, args.k, pad, eos)
    for path in paths:
        r = run(path, *table[path], prompts, n, eos, reference)
        print(f"{path:>9} {r['calls']:5d} {str(r['same as unwatched']):>5} {r['batch-1 greedy']:>3}/{r['prompts']:<3} "
              f"{r['violations']:10d}  {r['check cpu %']:6.2f} {r['check wall %']:6.2f} {r['ms/call']:7.2f} "
              f"{r['decode cpu s']:8.1f}" + (f"  first: {r['first']}" if r["first"] else ""), flush=True)


if __name__ == "__main__":
    main()
