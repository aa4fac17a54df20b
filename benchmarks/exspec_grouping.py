"""How often EXSPEC avoids realignment, and what realignment still costs.

For batch sizes 2, 4, 8, 16 and two prompt sets (lengths scattered over
4..48, and all equal), runs EQSPEC and EXSPEC with three selection policies
(Spec §8.2): ``laggards`` (the default: a same-length group, else the
shortest members), ``nearest`` (least padding this round) and ``authors`` (a
group only when it fills the whole batch, else the first B, as in
eBay/spec_dec) — and prints:

* group %: rounds whose batch needed no realignment (for EQSPEC: rounds where
  every ``δ_i = 0`` and no row left);
* realign %: share of decoding time spent realigning caches (the ``realign`` phase);
* other %: prefill, stacking members into a batch, bookkeeping;
* pad/round: mean ``Σ p_i`` of a round's batch (padding every forward call of
  the round attends over; for EXSPEC also what its fallback shifts);
* wait P90/P99: rounds a request spent queued or passed over (head-of-line
  blocking; every prompt is submitted at the start, EQSPEC's later static
  batches wait for the earlier ones);
* tok/s and whether the output equals EQSPEC's.

    python benchmarks/exspec_grouping.py [--pair tiny-llama] [--batch-sizes 2 4 8 16]
        [--window-factor 4] [--max-new-tokens 32] [--k 4] [--json]

``--pair`` takes any name of :mod:`batchspec.models.registry` (``default``
for the trained byte-level pair: its prompts are slices of the held-out
sample, real text; other pairs get random token ids).
"""

from __future__ import annotations

import argparse
import json
import random

import torch

import batchspec
from batchspec.reference.exspec_policy import POLICIES
from batchspec.scheduler import Scheduler
from batchspec.validate import vocab_size
from options import positive


def load(name: str):
    """``(target, draft, token source)`` of a pair: the source is a flat list of
    token ids that prompts are sliced from."""
    if name.startswith("tiny-"):
        from batchspec.models import tiny

        target, draft = tiny.pair(name[5:], "perturbed", dtype=torch.float32)
    else:
        from batchspec.models.registry import load_pair

        target, draft = load_pair(name, dtype=torch.float32)[:2]
    if name == "default":
        from batchspec.models.default_pair import held_out_sample

        return target, draft, held_out_sample().flatten().tolist()
    rng = random.Random(11)
    return target, draft, [rng.randrange(2, vocab_size(target)) for _ in range(1 << 14)]


def prompts(source: list[int], count: int, equal: bool, seed: int) -> list[list[int]]:
    """``count`` prompts sliced from ``source``: all 16 tokens, or 4..48."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = 16 if equal else rng.randint(4, 48)
        start = rng.randrange(len(source) - n)
        out.append(source[start:start + n])
    return out


def exspec(target, draft, batch, policy, window, config):
    """EXSPEC through the online scheduler, prompts submitted shortest first
    (what ``generate(method="exspec")`` does, with a choice of policy).
    Returns outputs in input order, the stats, and the prompts by request id."""
    scheduler = Scheduler(target, draft, num_draft_tokens=config["k"], max_new_tokens=config["n"],
                          batch_size=config["b"], window_size=window, policy=POLICIES[policy])
    order = sorted(range(len(batch)), key=lambda r: len(batch[r]))
    ids = {scheduler.submit(batch[r]): r for r in order}
    outputs = scheduler.run()
    sequences = [None] * len(batch)
    for request, out in outputs.items():
        sequences[ids[request]] = out.tokens
    return sequences, scheduler.stats, [batch[ids[request]] for request in range(len(batch))]


def padding_per_round(records, prompts: list[list[int]]) -> float:
    """Mean ``Σ p_i = B·max c_i - Σ c_i`` of each round's batch, replaying the
    committed counts from the prompt lengths (the same for every method)."""
    length = {r: len(p) for r, p in enumerate(prompts)}
    total = 0
    for record in records:
        c = [length[r] for r in record.requests]
        total += len(c) * max(c) - sum(c)
        for r, a in zip(record.requests, record.appended):
            length[r] += a
    if all(hasattr(r, "padding") for r in records):  # EXSPEC records its own: they must agree
        assert total == sum(r.padding for r in records), "replayed padding differs from the records"
    return total / len(records)


def row(stats, sequences, reference, prompts: list[list[int]]) -> dict:
    """One table row; ``prompts`` by request id."""
    decode = sum(stats.phase_seconds.values())
    wait = stats.waiting_percentiles((90, 99))["rounds"]
    return {
        "group %": round(100 * stats.group_rate, 1),
        "realign %": round(100 * stats.phase_seconds["realign"] / decode, 1),
        "other %": round(100 * stats.phase_seconds["other"] / decode, 1),
        "pad/round": round(padding_per_round(stats.per_round, prompts), 1),
        "rounds": stats.rounds,
        "wait P90/P99": f"{wait[90]:.0f}/{wait[99]:.0f}",
        "tok/s": round(stats.generated_tokens / stats.wall_seconds, 1),
        "= eqspec": sequences == reference,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="tiny-llama")
    ap.add_argument("--batch-sizes", type=positive, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--window-factor", type=positive, default=4, help="W = factor x B")
    ap.add_argument("--prompts-per-batch", type=positive, default=4, help="prompts = this x B")
    ap.add_argument("--k", type=positive, default=4)
    ap.add_argument("--max-new-tokens", type=positive, default=32)
    ap.add_argument("--threads", type=positive, default=1, help="CPU threads (tiny models run best on 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, draft, source = load(args.pair)
    rows = []
    for b in args.batch_sizes:
        for equal in (False, True):
            batch = prompts(source, args.prompts_per_batch * b, equal, seed=b)
            config = {"k": args.k, "n": args.max_new_tokens, "b": b}
            eq = batchspec.generate(target, draft, batch, method="eqspec", num_draft_tokens=args.k,
                                    max_new_tokens=args.max_new_tokens, batch_size=b)
            head = {"batch": b, "prompts": "equal" if equal else "varied"}
            rows.append({**head, "method": "eqspec", **row(eq.stats, eq.sequences, eq.sequences, batch)})
            for policy in POLICIES:
                sequences, stats, by_id = exspec(target, draft, batch, policy, args.window_factor * b, config)
                rows.append({**head, "method": f"exspec-{policy}", **row(stats, sequences, eq.sequences, by_id)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"pair {args.pair}, k = {args.k}, {args.max_new_tokens} new tokens, "
          f"{args.prompts_per_batch} x B prompts, W = {args.window_factor} x B, float32, "
          f"{torch.get_num_threads()} thread(s)")
    keys = list(rows[0])
    width = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    print("  ".join(f"{k:>{width[k]}}" for k in keys))
    for r in rows:
        print("  ".join(f"{r[k]!s:>{width[k]}}" for k in keys))


if __name__ == "__main__":
    main()
