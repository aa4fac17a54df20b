"""Time the default pair on this machine and add the figures to its model card.

Run ``python -m batchspec.models.measure_default`` after training (it changes no
weights, so it can be rerun on any machine). Everything is greedy at batch 1:

* forward cost: one cached forward call of each model (``pair_metrics.per_call_ms``);
* speed-up: ``batchspec.generate`` with ``method="autoregressive"`` (the target
  alone, the baseline) against ``method="eqspec"`` for each ``k``, on prompts cut
  from the committed held-out sample. Every speculative output is checked to
  equal the autoregressive one token for token.

Runs alternate between methods and are repeated; medians are used, which keeps
the comparison fair on a machine shared with other work. The default is one
torch thread: at batch 1 these models are too small to gain from a second one,
and on a 2-core machine that is running anything else, two OpenMP threads wait
on each other (a 6 ms target call measured 92 ms median that way).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import batchspec
from batchspec.models import default_pair, model_card, pair_metrics

KS = (2, 3, 4, 5, 6, 8)
PROMPTS = 8
PROMPT_BYTES = 128
MAX_NEW_TOKENS = 64
REPEATS = 5


def held_out_prompts(directory: Path) -> list[list[int]]:
    """The first ``PROMPT_BYTES`` bytes of every eighth sample window."""
    sample = default_pair.held_out_sample(directory)  # [64, 256]
    step = sample.shape[0] // PROMPTS
    return [sample[i * step, :PROMPT_BYTES].tolist() for i in range(PROMPTS)]


def forward_cost(target, draft, prompt: torch.Tensor) -> dict:
    """Per-call cost of each model at batch 1 after ``prompt`` ([1, P] ids)."""
    t_ms, d_ms = pair_metrics.per_call_ms(target, prompt), pair_metrics.per_call_ms(draft, prompt)
    return {"batch": 1, "threads": torch.get_num_threads(), "prompt_bytes": prompt.shape[1],
            "target_ms_per_call": round(t_ms, 3), "draft_ms_per_call": round(d_ms, 3),
            "ratio_target_over_draft": round(t_ms / d_ms, 2),
            "target_ms_per_call_6_tokens": round(pair_metrics.per_call_ms(target, prompt, new_tokens=6), 3),
            "cpu": pair_metrics.cpu_name()}


def run(target, draft, prompts, method: str, k: int):
    """One batch-1 generation of all prompts."""
    return batchspec.generate(target, draft, prompts, method=method, num_draft_tokens=max(k, 1),
                              max_new_tokens=MAX_NEW_TOKENS, batch_size=1)


def speculative(target, draft, prompts) -> dict:
    """Speed-up of EQSPEC over the autoregressive target, for each ``k``."""
    run(target, draft, prompts[:1], "autoregressive", 0)  # warm-up
    run(target, draft, prompts[:1], "eqspec", 3)
    methods = [("autoregressive", 0)] + [("eqspec", k) for k in KS]
    walls, last = {m: [] for m in methods}, {}
    for _ in range(REPEATS):
        for method, k in methods:
            last[method, k] = result = run(target, draft, prompts, method, k)
            walls[method, k].append(result.stats.wall_seconds)
    ar, ar_wall = last["autoregressive", 0], statistics.median(walls["autoregressive", 0])
    by_k = []
    for k in KS:
        result, wall = last["eqspec", k], statistics.median(walls["eqspec", k])
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
            "prompts": len(prompts), "prompt_bytes": len(prompts[0]), "max_new_tokens": MAX_NEW_TOKENS,
            "repeats": REPEATS, "autoregressive_wall_seconds_median": round(ar_wall, 3),
            "autoregressive_target_calls": ar.stats.target_calls,
            "autoregressive_tokens_per_second": round(ar.stats.generated_tokens / ar_wall, 2),
            "by_k": by_k, "best_k": best["k"], "best_speedup": best["speedup"],
            "best_tokens_per_target_call": best["tokens_per_target_call"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=default_pair.DEFAULT_DIR)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (see the module docstring)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    card = default_pair.load_card(args.dir)
    target, draft = default_pair.load_default_pair(torch.float32, args.dir)
    prompts = held_out_prompts(args.dir)
    card["forward_cost"] = forward_cost(target, draft, torch.tensor(prompts[:1]))
    card["speculative"] = speculative(target, draft, prompts)
    (args.dir / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (args.dir / "MODEL_CARD.md").write_text(model_card.render(card))
    print(json.dumps({k: card[k] for k in ("forward_cost", "speculative")}, indent=2))


if __name__ == "__main__":
    main()
