"""How steady the machine was while the benchmark ran.

A fixed workload (the same matrix products on the pair's device, no model)
is timed before every timed case. Its own spread says how much of a cell's
spread is the machine rather than the decoder: on the development CPU a
quiet day gave ±2-7 % per cell, a noisy one ±5-41 %, when this workload
took 21 ms and, seconds later, 28. A run whose workload spread exceeds
:data:`UNSTEADY` gets a warning under its table."""

from __future__ import annotations

import statistics

import torch

from ..driver import clock as _clock

#: half the min-max range over the median above which a run is called unsteady
UNSTEADY = 0.10
SIZE, PRODUCTS = 256, 40  # about 21 ms on one core of the development CPU


def workload(device):
    """A ``() -> None`` that runs the fixed workload (its operands made once)."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(SIZE, SIZE, generator=generator).to(device)

    def run() -> None:
        x = a
        for _ in range(PRODUCTS):
            x = torch.tanh(x @ a)  # tanh keeps the values bounded, and each product depends on the last

    run()  # once untimed: the first run pays for allocations and cold caches
    return run


def probe(run, device) -> float:
    """Seconds of one run of the workload."""
    start = _clock(device)
    run()
    return _clock(device) - start


def summary(seconds: list[float]) -> dict | None:
    """``{"seconds", "median", "spread", "steady"}`` of the probes (None if none):
    ``spread`` as in the table, half the min-max range over the median."""
    if not seconds:
        return None
    median = statistics.median(seconds)
    spread = (max(seconds) - min(seconds)) / median / 2
    return {"workload": f"{PRODUCTS} products of {SIZE} x {SIZE} float32 matrices", "seconds": list(seconds),
            "median": median, "spread": spread, "steady": spread <= UNSTEADY}


def line(steadiness: dict | None) -> str | None:
    """One line for under the table, or None without probes."""
    if steadiness is None:
        return None
    text = (f"machine: a fixed workload ({steadiness['workload']}) timed {len(steadiness['seconds'])} times "
            f"between the cases, median {steadiness['median'] * 1e3:.1f} ms, spread ±{steadiness['spread']:.0%}")
    if not steadiness["steady"]:
        text += (f" (over ±{UNSTEADY:.0%}: the machine's speed changed during the run; single cells are "
                 "unreliable, compare paired ratios or run again)")
    return text
