"""Measure the speculative speed-up of the default pair and add it to its model card.

Run ``python -m batchspec.models.measure_default`` after training. Greedy, batch 1,
two CPU threads: ``batchspec.generate`` with ``method="autoregressive"`` (the
target alone, the baseline) and with ``method="eqspec"`` for each ``k``, on
prompts cut from the committed held-out sample. Runs alternate between methods
and are repeated; the median wall time of each method is used, which keeps the
comparison fair on a machine shared with other work. Every speculative output
is also checked to equal the autoregressive one token for token.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import batchspec
from batchspec.models import default_pair, model_card

KS = (2, 3, 4, 5)
PROMPTS = 8
PROMPT_BYTES = 128
MAX_NEW_TOKENS = 64
REPEATS = 3


def held_out_prompts(directory: Path) -> list[list[int]]:
    """The first ``PROMPT_BYTES`` bytes of every eighth sample window."""
    sample = default_pair.held_out_sample(directory)  # [64, 256]
    step = sample.shape[0] // PROMPTS
    return [sample[i * step, :PROMPT_BYTES].tolist() for i in range(PROMPTS)]


def run(target, draft, prompts, method: str, k: int):
    """One batch-1 generation of all prompts."""
    return batchspec.generate(target, draft, prompts, method=method, num_draft_tokens=max(k, 1),
                              max_new_tokens=MAX_NEW_TOKENS, batch_size=1)


def measure(directory: Path) -> dict:
    """The ``speculative`` section of the card."""
    target, draft = default_pair.load_default_pair(torch.float32, directory)
    prompts = held_out_prompts(directory)
    run(target, draft, prompts[:1], "autoregressive", 0)  # warm-up
    run(target, draft, prompts[:1], "eqspec", 3)
    methods = [("autoregressive", 0)] + [("eqspec", k) for k in KS]
    walls = {m: [] for m in methods}
    last = {}
    for _ in range(REPEATS):
        for method, k in methods:
            last[(method, k)] = result = run(target, draft, prompts, method, k)
            walls[(method, k)].append(result.stats.wall_seconds)
    ar = last[("autoregressive", 0)]
    ar_wall = statistics.median(walls[("autoregressive", 0)])
    by_k = []
    for k in KS:
        result, wall = last[("eqspec", k)], statistics.median(walls[("eqspec", k)])
        by_k.append({"k": k, "tokens_per_target_call": round(result.stats.tokens_per_target_call, 3),
                     "acceptance_rate": round(result.stats.acceptance_rate, 4),
                     "target_calls": result.stats.target_calls, "draft_calls": result.stats.draft_calls,
                     "wall_seconds_median": round(wall, 3),
                     "tokens_per_second": round(result.stats.generated_tokens / wall, 2),
                     "speedup": round(ar_wall / wall, 3),
                     "phase_seconds": {p: round(s, 3) for p, s in result.stats.phase_seconds.items()},
                     "matches_autoregressive": result.sequences == ar.sequences})
    best = max(by_k, key=lambda r: r["speedup"])
    return {"method": "eqspec", "batch": 1, "greedy": True, "threads": torch.get_num_threads(),
            "prompts": len(prompts), "prompt_bytes": PROMPT_BYTES, "max_new_tokens": MAX_NEW_TOKENS,
            "repeats": REPEATS, "autoregressive_wall_seconds_median": round(ar_wall, 3),
            "autoregressive_target_calls": ar.stats.target_calls,
            "autoregressive_tokens_per_second": round(ar.stats.generated_tokens / ar_wall, 2),
            "by_k": by_k, "best_k": best["k"], "best_speedup": best["speedup"],
            "best_tokens_per_target_call": best["tokens_per_target_call"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=default_pair.DEFAULT_DIR)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    card = default_pair.load_card(args.dir)
    card["speculative"] = measure(args.dir)
    (args.dir / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (args.dir / "MODEL_CARD.md").write_text(model_card.render(card))
    print(json.dumps(card["speculative"], indent=2))


if __name__ == "__main__":
    main()
