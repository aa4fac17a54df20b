"""What the ``custom_generate`` door costs: transformers' ``generate`` with
batchspec's folder (``batchspec.hf.HUB``) against ``batchspec.generate`` on the
same prompts, and both against plain greedy ``generate`` (and transformers'
own assisted decoding, which runs at batch 1 only).

The embedded default pair, float32, CPU, one thread; left-padded windows of
held-out Python source of ragged lengths; every speculative method drafts a
fixed ``k`` (``num_assistant_tokens=K, assistant_confidence_threshold=0``
and ``num_draft_tokens=K``). Each repeat runs every method once, in turn
(paired, interleaved), and records wall and CPU seconds; medians are printed
with the ratios. The custom path's tensor is checked equal to plain
``generate``'s first.

    python benchmarks/hf_generate.py [--batches 1 8 32] [--repeat 5] [--new 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import batchspec
from batchspec import hf
from batchspec.models.default_pair import held_out_sample, load_default_pair
from options import positive

K = 4


def batch_of(size: int):
    """``(input_ids, attention_mask)``: ``size`` windows of 24..71 bytes, left-padded with 0."""
    sample = held_out_sample()
    lengths = [24 + (17 * i) % 48 for i in range(size)]
    width = max(lengths)
    ids = torch.zeros(size, width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, width - n:], mask[i, width - n:] = sample[i % 64, :n], 1
    return ids, mask


def methods(target, draft, ids, mask, new: int) -> dict:
    common = dict(input_ids=ids, attention_mask=mask, max_new_tokens=new, pad_token_id=0)
    assisted = dict(num_assistant_tokens=K, assistant_confidence_threshold=0)
    runs = {
        "plain generate": lambda: target.generate(**common),
        "custom_generate": lambda: target.generate(**common, **assisted, assistant_model=draft,
                                                   custom_generate=hf.HUB, trust_remote_code=True),
        "batchspec.generate": lambda: batchspec.generate(target, draft, ids, attention_mask=mask,
                                                         max_new_tokens=new, num_draft_tokens=K),
    }
    if ids.shape[0] == 1:
        runs["HF assisted"] = lambda: target.generate(**common, **assisted, assistant_model=draft)
    return runs


def timed(run) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def paired(over, under, which: int) -> float:
    """The median over repeats of one repeat's ratio ``over / under`` of wall (0) or CPU (1) seconds."""
    return statistics.median(a[which] / b[which] for a, b in zip(over, under))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=positive, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeat", type=positive, default=5)
    parser.add_argument("--new", type=positive, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, draft = load_default_pair(torch.float32)
    try:
        target.generate(**dict(zip(("input_ids", "attention_mask"), batch_of(4))), assistant_model=draft,
                        max_new_tokens=4)
    except ValueError as error:
        print(f"transformers at batch 4 with assistant_model: ValueError: {error}")
    print(f"default pair, float32, CPU, 1 thread, k={K}, {args.new} new tokens, medians of {args.repeat} "
          f"paired repeats")
    print("ratios: median over repeats of one repeat's ratio; 'speed-up' = plain / method, 'cost' = method / "
          "batchspec.generate; wall, then CPU time")
    print(f"{'batch':>5}  {'method':<19} {'wall s':>7} {'cpu s':>7} {'tok/s':>6} {'speed-up':>15} {'cost':>13}")
    for size in args.batches:
        ids, mask = batch_of(size)
        runs = methods(target, draft, ids, mask, args.new)
        with torch.no_grad():
            assert torch.equal(runs["custom_generate"](), runs["plain generate"]()), "custom_generate differs"
            seconds = {name: [] for name in runs}
            for _ in range(args.repeat):
                for name, run in runs.items():
                    seconds[name].append(timed(run))
        for name, s in seconds.items():
            wall, cpu = statistics.median(w for w, _ in s), statistics.median(c for _, c in s)
            up = [paired(seconds["plain generate"], s, j) for j in (0, 1)]
            cost = [paired(s, seconds["batchspec.generate"], j) for j in (0, 1)]
            print(f"{size:>5}  {name:<19} {wall:>7.3f} {cpu:>7.3f} {size * args.new / wall:>6.0f} "
                  f"{up[0]:>6.2f}x {up[1]:>6.2f}x {cost[0]:>6.3f} {cost[1]:>6.3f}")


if __name__ == "__main__":
    main()
