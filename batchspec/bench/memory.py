"""Peak memory of one call, above what was in use when it started.

CUDA: the allocator's own peak (``torch.cuda.max_memory_allocated``). CPU:
the process's resident set, sampled every millisecond by a thread (torch's
CPU tensors are not seen by ``tracemalloc``); blocks of 64 KiB and more are
made to go back to the system when freed, so the resident set follows the
live tensors. Tensors smaller than that, and peaks shorter than a
millisecond, can be missed: read the CPU figures as the cache-sized
allocations they are."""

from __future__ import annotations

import os
import threading

import torch

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def return_large_blocks() -> None:
    """Ask glibc to map every block of 64 KiB or more on its own and unmap
    it when freed (``mallopt(M_MMAP_THRESHOLD)``), so that the resident set
    falls when a tensor dies instead of staying at the process's high-water
    mark; ``malloc_trim`` hands back what earlier calls freed into the heap.
    It makes every large allocation a fresh, page-faulted mapping, so the
    benchmark calls it only for the memory pass, after everything it times.
    No-op where that is not glibc."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
        libc.malloc_trim(0)  # and give back what earlier calls freed into the heap
    except (OSError, AttributeError):
        pass


def peak_bytes(fn, device) -> tuple[object, int]:
    """``(fn(), peak bytes above the starting level)``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        value = fn()
        torch.cuda.synchronize(device)
        return value, torch.cuda.max_memory_allocated(device) - start
    return_large_blocks()
    start, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            done.wait(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        value = fn()
    finally:
        done.set()
        thread.join()
    return value, max(peak[0], _rss()) - start
