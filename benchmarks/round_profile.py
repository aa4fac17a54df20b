"""Where a batch-1 round's time goes: EQSPEC with ``confident`` against
transformers' assisted generation, by per-call CPU-time hooks.

Both decode the same prompts at batch 1, greedily, with the same pair; a
forward pre/post hook on each model adds the process CPU time (and wall
time) of every call. Per decoder it prints the target and draft calls, the
seconds in each model's calls, and everything else (the decoder's own
bookkeeping: building inputs, masks, caches, acceptance), all per round
(one target call, prefill aside, is one round), median over ``--repeats``
interleaved runs, each run's outputs checked equal to the other's.

Run: ``python benchmarks/round_profile.py`` (the embedded default pair,
float32, one thread; ``--pair``, ``--prompts``, ``--max-new-tokens``,
``--repeats``, ``--threads`` to change them).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import batchspec
from batchspec.bench import peers
from batchspec.models.prompts import default_prompts, text_prompts
from batchspec.models.registry import load_pair
from batchspec.reference.draft_policy import Confident
from options import positive


class CallClock:
    """Per model, the CPU and wall seconds spent inside its forward calls, and the calls."""

    def __init__(self, models: dict):
        self.spent = {name: [0.0, 0.0, 0] for name in models}
        self.hooks = []
        for name, model in models.items():
            self.hooks.append(model.register_forward_pre_hook(lambda *_, n=name: self._enter(n)))
            self.hooks.append(model.register_forward_hook(lambda *_, n=name: self._leave(n)))
        self.began: dict = {}

    def _enter(self, name):
        self.began[name] = (time.process_time(), time.perf_counter())

    def _leave(self, name):
        cpu, wall = self.began.pop(name)
        entry = self.spent[name]
        entry[0] += time.process_time() - cpu
        entry[1] += time.perf_counter() - wall
        entry[2] += 1

    def close(self):
        for hook in self.hooks:
            hook.remove()


def profile(run, target, draft) -> dict:
    """One run's split: ``{"outputs", "cpu", "wall", "target": [cpu, wall, calls], "draft": [...]}``."""
    clock = CallClock({"target": target, "draft": draft})
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        outputs = run()
    finally:
        clock.close()
    return {"outputs": outputs, "cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
            **clock.spent}


def ours(target, draft, prompts, new, eos):
    return [batchspec.generate(target, draft, [p], num_draft_tokens=Confident(), max_new_tokens=new,
                               batch_size=1, eos_token_id=eos).sequences[0] for p in prompts]


def hf(target, draft, prompts, new, eos):
    return peers.hf_assisted(target, draft, prompts, new, eos)


def per_round(runs: list[dict]) -> dict:
    """Medians over runs of seconds per round (target calls less the prefill share)."""
    out = {}
    for clock in (0, 1):
        name = ("cpu", "wall")[clock]
        rows = []
        for r in runs:
            rounds = r["target"][2]
            total = r[name]
            rows.append((r["target"][clock] / rounds, r["draft"][clock] / rounds,
                         (total - r["target"][clock] - r["draft"][clock]) / rounds, total / rounds))
        out[name] = [statistics.median(col) for col in zip(*rows)]
    out["calls"] = (runs[0]["target"][2], runs[0]["draft"][2])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="default")
    parser.add_argument("--prompts", type=positive, default=4)
    parser.add_argument("--max-new-tokens", type=positive, default=48)
    parser.add_argument("--repeats", type=positive, default=5)
    parser.add_argument("--threads", type=positive, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, draft, tokenizer = load_pair(args.pair, dtype=torch.float32)
    if args.pair == "default":  # the byte pair has no EOS
        prompts, eos = default_prompts(args.prompts, 0), None
    else:
        prompts, eos = text_prompts(tokenizer, args.prompts, 0), getattr(tokenizer, "eos_token_id", None)
    runs = {"eqspec confident": [], "hf assisted": []}
    with torch.no_grad():
        for n in range(args.repeats + 1):  # the first pass warms up, untimed
            outs = {}
            for name, fn in (("eqspec confident", ours), ("hf assisted", hf)):
                result = profile(lambda f=fn: f(target, draft, prompts, args.max_new_tokens, eos), target, draft)
                outs[name] = result["outputs"]
                if n:
                    runs[name].append(result)
            assert outs["eqspec confident"] == outs["hf assisted"], "outputs differ"
    print(f"{args.pair}, batch 1, {args.prompts} prompts, {args.max_new_tokens} new tokens, {args.threads} thread(s), "
          f"median of {args.repeats}; ms per round (a round: one target call)")
    print(f"{'decoder':>17}  {'clock':>5}  {'target':>7}  {'draft':>7}  {'other':>7}  {'round':>7}  calls (t/d)")
    for name, rs in runs.items():
        split = per_round(rs)
        for clock in ("cpu", "wall"):
            t, d, o, total = (1e3 * x for x in split[clock])
            print(f"{name:>17}  {clock:>5}  {t:7.2f}  {d:7.2f}  {o:7.2f}  {total:7.2f}  {split['calls'][0]}/"
                  f"{split['calls'][1]}")


if __name__ == "__main__":
    main()
