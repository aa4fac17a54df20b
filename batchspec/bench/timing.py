"""Three clocks per timed call, paired ratios, and the verdict they support.

Wall-clock time is what a user waits, but on a shared machine it carries
the neighbours' load: one cell of the real pair moved from 1.93 to 4.81
tok/s between repeats. Process CPU time (``time.process_time``: every
thread of this process) counts only the work this process did, so it
spreads far less when another process takes a core; it is not immune (an
OpenMP thread spinning while its core is taken still counts). On CUDA the
work is the device's: CUDA-event time. The verdict rests on the steadier
clock of the device: CPU time on a CPU, CUDA-event time on a GPU.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..driver import clock

#: What the verdict says of a cell, by where its paired ratios to ``generate`` lie.
FASTER, ON_PAR, SLOWER = "faster", "on par", "slower"


@dataclass(frozen=True)
class Timing:
    """Seconds of one call by three clocks: ``wall`` (perf_counter, after the
    device's queue drained), ``cpu`` (this process's CPU time, all threads),
    ``device`` (CUDA-event time; None off CUDA)."""

    wall: float
    cpu: float
    device: float | None = None

    def steady(self) -> float:
        """The clock the verdict uses: CUDA-event time on a GPU, else CPU time."""
        return self.cpu if self.device is None else self.device


def timed(run, device):
    """``(run(), Timing)``: ``run`` timed by the three clocks."""
    events = None
    if device.type == "cuda":
        events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        events[0].record()
    wall, cpu = clock(device), time.process_time()
    out = run()
    wall, cpu = clock(device) - wall, time.process_time() - cpu
    if events is not None:
        events[1].record()
        torch.cuda.synchronize(device)
        return out, Timing(wall, cpu, events[0].elapsed_time(events[1]) / 1e3)
    return out, Timing(wall, cpu)


def paired(reference: list[float], seconds: list[float]) -> list[float]:
    """``reference[n] / seconds[n]`` for each interleaved pass ``n``: each cell's
    ratio to ``generate`` from the two runs of the same pass, seconds apart,
    so that the machine's drift between passes (±20% on the 2-core CPU) cancels
    instead of entering as a ratio of medians taken at different moments."""
    if len(reference) != len(seconds):
        raise ValueError(f"{len(reference)} passes of generate against {len(seconds)}: not paired")
    return [r / s for r, s in zip(reference, seconds)]


def verdict(ratios: list[float] | None) -> str | None:
    """``faster`` when every paired ratio (``generate``'s time / ours) is above
    1, ``slower`` when every one is below, ``on par`` when their range covers
    1.0; None with fewer than two repeats (one ratio has no spread to judge)."""
    if not ratios or len(ratios) < 2:
        return None
    if min(ratios) > 1.0:
        return FASTER
    if max(ratios) < 1.0:
        return SLOWER
    return ON_PAR


def spread(seconds: list[float]) -> float:
    """Half the min-max range over the median: ``±x`` of one cell's repeats."""
    return (max(seconds) - min(seconds)) / statistics.median(seconds) / 2
