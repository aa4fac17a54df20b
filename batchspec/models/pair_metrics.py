"""Quality and cost figures of a target/draft pair, as recorded in the model card.

All quality figures are teacher-forced on fixed windows of held-out bytes: in a
window of ``W`` bytes the model predicts bytes ``1..W-1`` from their prefixes
(byte 0 has no context and is not scored), so each window contributes ``W-1``
predictions.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from ..reference.model_call import run_forward
from ..reference.storage import new_cache


@dataclass(frozen=True)
class WindowScores:
    """Per-position results of one model on a ``[N, W]`` block of windows."""

    nll_bits: torch.Tensor  # [N, W-1] float64, -log2 p(true next byte)
    argmax: torch.Tensor  # [N, W-1] int64, greedy next-byte choice


@torch.no_grad()
def score_windows(model: PreTrainedModel, windows: torch.Tensor, chunk: int = 16) -> WindowScores:
    """Run ``model`` over ``windows`` ([N, W] ids) in chunks of ``chunk`` rows."""
    nll, top = [], []
    for rows in windows.split(chunk):
        logits = model(input_ids=rows, use_cache=False).logits[:, :-1].double()  # [n, W-1, V]
        logp = torch.log_softmax(logits, dim=-1)
        nll.append(-logp.gather(-1, rows[:, 1:, None]).squeeze(-1) / math.log(2))
        top.append(logits.argmax(dim=-1))
    return WindowScores(torch.cat(nll), torch.cat(top))


def bits_per_byte(scores: WindowScores) -> float:
    """Mean held-out cross-entropy in bits per predicted byte."""
    return scores.nll_bits.mean().item()


def greedy_agreement(target: WindowScores, draft: WindowScores) -> float:
    """Fraction of positions where the draft's greedy next byte equals the target's."""
    return (target.argmax == draft.argmax).double().mean().item()


@torch.no_grad()
def per_call_ms(model: PreTrainedModel, prompt: torch.Tensor, new_tokens: int = 1, calls: int = 48,
                repeats: int = 3) -> float:
    """Median wall time (ms) of one cached forward call at batch 1.

    ``prompt`` ([1, P] ids) is prefilled into a fresh cache (``batchspec.reference.storage``); then
    ``calls`` forward calls each feed ``new_tokens`` ids (1 for a decoding step,
    ``k + 1`` for a verification step) on top of the growing cache. The median
    over all timed calls of ``repeats`` runs is returned, which ignores the odd
    slow call caused by other processes on the machine.
    """
    times = []
    step = torch.full((1, new_tokens), 32, dtype=torch.long)  # [1, new_tokens] spaces
    for _ in range(repeats):
        cache = new_cache(model)
        length = prompt.shape[1]
        run_forward(model, cache, prompt, torch.ones_like(prompt), torch.arange(length)[None], 1)
        for i in range(calls + 2):
            positions = torch.arange(length, length + new_tokens)[None]  # [1, new_tokens]
            mask = torch.ones((1, length + new_tokens), dtype=torch.long)
            start = time.perf_counter()
            run_forward(model, cache, step, mask, positions, 1)
            length += new_tokens
            if i >= 2:  # the first calls warm allocator and kernels
                times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def cpu_name() -> str:
    """The CPU model and core count."""
    info = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
             if line.startswith("model name")] if info.exists() else []
    return f"{names[0] if names else platform.machine()}, {os.cpu_count()} cores"
