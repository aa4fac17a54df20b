"""Train the embedded default target/draft pair from the Python standard library.

Run ``python -m batchspec.models.train_default --out batchspec/models/default``
(about nine minutes on an idle two-core machine: 0.65 s per target step with two
threads, 0.04 s per draft step, then a minute of evaluation). The script

1. reads and splits the stdlib source (``stdlib_corpus``),
2. trains the target (12 layers) and then the draft (1 layer), both stock
   ``LlamaForCausalLM`` over 256 byte tokens, for a fixed number of steps with
   seeded initialisation and seeded batches,
3. saves both in float16 (half the file size; the card's figures are measured
   after the float16 round trip, in float32 compute),
4. reloads the saved weights and writes ``held_out_sample.safetensors``,
   ``card.json`` and ``MODEL_CARD.md`` with the held-out quality figures.

The timings of the card (forward cost, speculative speed-up) depend on the
machine, not on the weights; ``python -m batchspec.models.measure_default``
adds them afterwards and can be rerun on its own.

Reproducibility: the data order and initialisation are seeded and the step
counts fixed, so a rerun with the same Python, torch, CPU and ``--threads`` gives
the same weights; another thread count or CPU may differ in the last bits of
float arithmetic, and so in the weights. The card records the thread count used.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from batchspec.models import default_pair, model_card, pair_metrics, stdlib_corpus
from batchspec.models.bytes import VOCAB_SIZE

WINDOW = 256  # training context, bytes
HELD_OUT_WINDOWS = 1024  # full held-out evaluation: 1024 x 256 bytes
SAMPLE_WINDOWS = 64  # committed test sample: 64 x 256 bytes
SAMPLE_SHIFT = 896  # bytes; moves the sample's windows off the evaluation windows' grid


@dataclass(frozen=True)
class Plan:
    """Architecture and optimisation of one model."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    steps: int
    batch: int
    lr: float
    seed: int
    warmup: int = 40


# Why these sizes. Cost: at batch 1 a call costs per-layer overhead, so 12 layers
# against 1 makes the target ~8x the draft per call. Quality: ten minutes of two
# cores is far too little compute for a 12-layer model to outrun a one-layer
# model of the same width (a 1-layer, 128-wide draft trained for 1000 steps
# scored 1.86 bits/byte against the target's 2.15), so the draft is also narrow
# and briefly trained, which leaves the target clearly stronger.
TARGET = Plan("target", layers=12, hidden=96, intermediate=256, heads=3, steps=700, batch=16, lr=2.5e-3, seed=0)
DRAFT = Plan("draft", layers=1, hidden=64, intermediate=192, heads=2, steps=400, batch=16, lr=3e-3, seed=1)


def build_model(plan: Plan) -> LlamaForCausalLM:
    """A freshly initialised byte-level Llama for ``plan`` (seeded)."""
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=plan.hidden, intermediate_size=plan.intermediate,
        num_hidden_layers=plan.layers, num_attention_heads=plan.heads, num_key_value_heads=plan.heads,
        max_position_embeddings=1024, tie_word_embeddings=True,
        # Byte ids 1 and 2 are ordinary bytes here, not BOS/EOS as in Llama's defaults.
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(plan.seed)
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def learning_rate(plan: Plan, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < plan.warmup:
        return plan.lr * (step + 1) / plan.warmup
    progress = (step - plan.warmup) / max(1, plan.steps - plan.warmup)
    return plan.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(plan: Plan, stream: torch.Tensor) -> tuple[LlamaForCausalLM, dict]:
    """Train one model on random windows of ``stream``; return it and its training record."""
    model = build_model(plan).train()
    opt = torch.optim.AdamW(model.parameters(), lr=plan.lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(1000 + plan.seed)
    start, recent = time.perf_counter(), []
    for step in range(plan.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(plan, step)
        batch = stdlib_corpus.random_batch(stream, plan.batch, WINDOW, gen)  # [B, W]
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = (recent + [loss.item() / math.log(2)])[-20:]
        if step % 20 == 0 or step == plan.steps - 1:
            print(f"{plan.name} step {step:4d}  train {recent[-1]:.3f} bits/byte  "
                  f"{time.perf_counter() - start:6.1f}s", flush=True)
    record = {"steps": plan.steps, "batch": plan.batch, "window": WINDOW, "peak_lr": plan.lr,
              "train_bytes_seen": plan.steps * plan.batch * WINDOW, "seed": plan.seed,
              "train_seconds": round(time.perf_counter() - start, 1),
              "final_train_bits_per_byte": round(sum(recent) / len(recent), 4)}
    return model.eval(), record


def describe(plan: Plan, model: LlamaForCausalLM, folder: Path) -> dict:
    """Size figures of one saved model."""
    return {"layers": plan.layers, "hidden": plan.hidden, "intermediate": plan.intermediate,
            "heads": plan.heads, "params": sum(p.numel() for p in model.parameters()),
            "file_bytes": (folder / "model.safetensors").stat().st_size}


def quality_figures(out: Path, corpus: stdlib_corpus.Corpus, sample: torch.Tensor) -> dict:
    """Held-out figures of the saved pair, reloaded exactly as users load it."""
    target, draft = default_pair.load_default_pair(torch.float32, out)
    figures = {}
    for name, windows in (("held_out", stdlib_corpus.even_windows(corpus.held_out, WINDOW, HELD_OUT_WINDOWS)),
                          ("test_sample", sample)):
        t, d = pair_metrics.score_windows(target, windows), pair_metrics.score_windows(draft, windows)
        figures[name] = {"windows": windows.shape[0], "window_bytes": windows.shape[1],
                         "predicted_bytes": t.nll_bits.numel(),
                         "bits_per_byte": {"target": round(pair_metrics.bits_per_byte(t), 5),
                                           "draft": round(pair_metrics.bits_per_byte(d), 5)},
                         "greedy_agreement": round(pair_metrics.greedy_agreement(t, d), 5)}
    return figures


def held_out_sample(corpus: stdlib_corpus.Corpus) -> torch.Tensor:
    """64 evenly spaced held-out windows, offset from the evaluation windows' grid."""
    shifted = corpus.held_out[SAMPLE_SHIFT:]
    return stdlib_corpus.even_windows(shifted, WINDOW, SAMPLE_WINDOWS)  # [64, 256]


def data_card(corpus: stdlib_corpus.Corpus) -> dict:
    """The card's description of the corpus and split."""
    return {"source": "CPython standard library *.py files (sysconfig stdlib path)",
            "python_version": platform.python_version(),
            "excluded_dirs": sorted(stdlib_corpus.EXCLUDED_DIRS),
            "split_rule": f"held out iff int(sha256(relative_path)[:8], 16) % {stdlib_corpus.HELD_OUT_MODULUS} == 0",
            "train_files": len(corpus.train_files), "train_bytes": corpus.train.numel(),
            "held_out_files": len(corpus.held_out_files), "held_out_bytes": corpus.held_out.numel(),
            "held_out_file_list": list(corpus.held_out_files)}


def train_pair(out: Path, corpus: stdlib_corpus.Corpus) -> dict:
    """Train, save and describe both models; return the card without evaluation figures."""
    card = {"data": data_card(corpus), "tokens": "bytes: vocab 256, token id = byte value, no EOS",
            "storage_dtype": "float16", "eval_dtype": "float32",
            "versions": {"torch": torch.__version__, "transformers": sys.modules["transformers"].__version__},
            "models": {}, "training": {}}
    for plan in (TARGET, DRAFT):
        model, record = train(plan, corpus.train)
        record.update(threads=torch.get_num_threads(), cpu=pair_metrics.cpu_name())
        folder = out / plan.name
        model.to(torch.float16).save_pretrained(folder)
        card["models"][plan.name] = describe(plan, model, folder)
        card["training"][plan.name] = record
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_pair.DEFAULT_DIR)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the card's timings use 2)")
    parser.add_argument("--eval-only", action="store_true",
                        help="keep the saved weights and training record; redo the evaluation figures")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    corpus = stdlib_corpus.load_corpus()
    args.out.mkdir(parents=True, exist_ok=True)
    sample = held_out_sample(corpus)
    if args.eval_only:
        card = default_pair.load_card(args.out)
        assert torch.equal(default_pair.held_out_sample(args.out), sample), "held-out sample changed"
    else:
        save_file({"windows": sample.to(torch.uint8).contiguous()}, args.out / default_pair.HELD_OUT_SAMPLE_FILE)
        card = train_pair(args.out, corpus)
        card["forward_cost"] = card["speculative"] = None  # timings: measure_default
    card.update(quality_figures(args.out, corpus, sample))
    (args.out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (args.out / "MODEL_CARD.md").write_text(model_card.render(card))
    print(json.dumps({k: card[k] for k in ("held_out", "test_sample")}, indent=2))
    print("timings: python -m batchspec.models.measure_default")


if __name__ == "__main__":
    main()
