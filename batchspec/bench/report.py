"""The benchmark's outputs: rows of a table, a JSON document, and plots."""

from __future__ import annotations

import os
import platform
import statistics

import torch

from ..stats import PHASES
from .timing import paired, spread, verdict

MB = 1 << 20


def rows(cells) -> list[dict]:
    """One row per cell, with ratios to ``generate`` at the same batch size by
    each clock: the median over passes of the paired ratio, and its range;
    the verdict from the steady clock's ratios (CPU time on a CPU, CUDA-event
    time on a GPU: :mod:`.timing`)."""
    base = {c.case.batch: c for c in cells if c.case.method == "generate"}
    best = best_ideal(cells)
    out = []
    for c in sorted(cells, key=lambda c: (c.case.batch, c.case.method, str(c.case.k))):
        ref = base.get(c.case.batch)
        ratios = paired(ref.seconds, c.seconds) if ref else None
        speedup = statistics.median(ratios) if ratios else None
        clock, steady = steady_clock(c)
        steady_ratios = paired(steady_clock(ref)[1], steady) if ref and steady else None
        row = {
            "batch": c.case.batch, "method": c.case.method, "k": c.case.k, "prompts": c.prompts,
            "tokens": c.tokens, "tok_per_s": c.tokens_per_second, "median_s": c.median,
            "min_s": min(c.seconds), "max_s": max(c.seconds), "repeats": len(c.seconds), "seconds": list(c.seconds),
            "vs_generate": speedup, "vs_generate_range": [min(ratios), max(ratios)] if ratios else None,
            "cpu_seconds": list(c.cpu_seconds), "device_seconds": list(c.device_seconds) or None,
            "verdict_clock": clock, "vs_generate_steady": statistics.median(steady_ratios) if steady_ratios else None,
            "vs_generate_steady_range": [min(steady_ratios), max(steady_ratios)] if steady_ratios else None,
            "verdict": verdict(steady_ratios) if c.case.method != "generate" else None,
            "wall_spread": spread(c.seconds), "steady_spread": spread(steady) if steady else None,
            "ideal": c.ideal_speedup, "best_ideal": best.get(c.case.batch),
            "achieved_over_ideal": speedup / c.ideal_speedup if speedup and c.ideal_speedup else None,
            "achieved_over_best": speedup / best[c.case.batch] if speedup and best.get(c.case.batch) else None,
            "target_calls": c.target_calls,
            "tokens_per_target_call": c.tokens / c.target_calls if c.target_calls else None,
            "exact": f"{c.prompts - len(c.mismatches)}/{c.prompts}", "mismatches": c.mismatches,
            "peak_mb": c.peak_bytes / MB if c.peak_bytes is not None else None,
            "in_calls": c.call_seconds / c.median if c.call_seconds else None,
        }
        if c.stats:
            decode = sum(c.stats["phase_seconds"].values()) or 1.0
            row["split"] = {p: c.stats["phase_seconds"][p] / decode for p in PHASES}
            row["realign_share"] = row["split"]["realign"]
            row["acceptance"] = c.stats["acceptance_rate"]
            row["group_rate"] = c.stats["group_rate"] if c.case.method == "exspec" else None
            row["drafted_k"] = sorted({r.drafted for r in c.per_round}) if c.per_round else None
        out.append(row)
    return out


def steady_clock(cell) -> tuple[str, list[float]]:
    """``(name, seconds per repeat)`` of the clock the verdict uses for ``cell``."""
    return ("cuda", cell.device_seconds) if cell.device_seconds else ("cpu", cell.cpu_seconds)


def best_ideal(cells) -> dict:
    """``{batch: the best ideal speedup over the draft policies run at that batch}``:
    the limit a user can reach by choosing among the policies offered (a fixed
    ``k``, ``auto``, ``confident``), not only the one a cell ran."""
    out: dict = {}
    for c in cells:
        if c.ideal_speedup:
            out[c.case.batch] = max(out.get(c.case.batch, 0.0), c.ideal_speedup)
    return out


def significant(value: float) -> str:
    """Three significant figures, never in exponent form (``2.26``, ``846``, ``1410``)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


#: (row key, heading, format, what it means): the table's columns and its legend.
COLUMNS = (
    ("batch", "B", "{}", "batch size"),
    ("method", "method", "{}", "ours (autoregressive, eqspec, exspec, and custom_generate: ours via generate) or HF's"),
    ("k", "k", "{}", "drafts per round, or the draft policy (auto, confident)"),
    ("tok_per_s", "tok/s", significant, "tokens per wall-clock second, median over repeats"),
    ("wall", "wall ×gen", "{}", "generate's wall time / ours, paired per repeat: median (min-max)"),
    ("steady", "CPU ×gen", "{}", "the same by process CPU time (CUDA-event time on a GPU): median (min-max)"),
    ("verdict", "verdict", "{}", "by the CPU (GPU) ratios: faster if all > 1, slower if all < 1, else on par"),
    ("tokens_per_target_call", "tok/call", "{:.2f}", "tokens committed per target forward call"),
    ("ideal", "ideal", "{:.2f}", "speedup with zero bookkeeping: the run priced as its forward calls alone"),
    ("achieved_over_ideal", "of ideal", "{:.0%}", "wall ×gen / ideal"),
    ("best_ideal", "best ideal", "{:.2f}", "the best ideal over the draft policies run at this batch"),
    ("in_calls", "in calls", "{:.0%}", "share of the measured time its forward calls alone account for"),
    ("realign_share", "realign", "{:.1%}", "share of decoding time spent realigning caches"),
    ("group_rate", "groups", "{:.0%}", "EXSPEC: rounds formed from one same-length group"),
    ("peak_mb", "peak MB", "{:.1f}", "peak memory of one run"),
    ("exact", "exact", "{}", "prompts whose output equals the target's batch-1 greedy output"),
)


def ratio_text(median: float | None, span: list | None) -> str | None:
    """``1.23 (1.10-1.31)``: a paired ratio's median and range."""
    return None if median is None else f"{median:.2f} ({span[0]:.2f}-{span[1]:.2f})"


def table(table_rows: list[dict]) -> str:
    """A plain-text table of :data:`COLUMNS` (``generate`` shows no ratios to itself)."""
    lines = []
    for r in table_rows:
        own = r["method"] == "generate"
        r = dict(r, wall=None if own else ratio_text(r["vs_generate"], r["vs_generate_range"]),
                 steady=None if own else ratio_text(r.get("vs_generate_steady"), r.get("vs_generate_steady_range")))
        lines.append([(fmt(r[key]) if callable(fmt) else fmt.format(r[key])) if r.get(key) is not None else "-"
                      for key, _, fmt, _ in COLUMNS])
    heads = [head for _, head, _, _ in COLUMNS]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(heads)]
    render = lambda cols: "  ".join(c.rjust(w) for c, w in zip(cols, widths))  # noqa: E731
    return "\n".join([render(heads)] + [render(line) for line in lines])


def legend(device) -> str:
    """What each column means, and which clock the verdict used."""
    clock = "CUDA-event time" if device.type == "cuda" else "process CPU time (all its threads)"
    lines = [f"  {head:<10} {meaning}" for _, head, _, meaning in COLUMNS]
    return "\n".join([f"columns: the verdict uses {clock}; a range covering 1.00 is 'on par'"] + lines)


def machine(device) -> dict:
    """Where the run happened."""
    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "device": str(device)}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    import transformers

    info["transformers"] = transformers.__version__
    return info


def costs_dict(costs, prefill: dict | None = None) -> dict | None:
    """The cost table, and each batch size's prefill seconds per model."""
    if costs is None:
        return None
    out = {"draft": {str(b): s for b, s in costs.draft.items()},
           "target": {str(b): {str(n): s for n, s in t.items()} for b, t in costs.target.items()}}
    if prefill is not None:
        out["prefill"] = {str(b): dict(p) for b, p in prefill.items()}
    return out


def plots(table_rows: list[dict], directory: str) -> list[str]:
    """The paper's pictures from one run; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    series: dict[str, list[dict]] = {}
    for r in table_rows:
        series.setdefault(r["method"] + ("" if r["k"] is None else f" k={r['k']}"), []).append(r)
    written = []

    batches = sorted({r["batch"] for r in table_rows})

    def save(fig, name):
        for ax in fig.axes:  # batch sizes as plain numbers (1, 4, 16), not powers of ten
            if ax.get_xscale() == "log":
                ax.set_xticks(batches, [str(b) for b in batches])
                ax.minorticks_off()
        path = os.path.join(directory, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rs in series.items():
        if len(rs) > 1:
            ax.plot([r["batch"] for r in rs], [r["tok_per_s"] / rs[0]["tok_per_s"] for r in rs], marker="o", label=name)
    ax.set(xscale="log", xlabel="batch size", ylabel="throughput / its batch-1 throughput",
           title="Throughput against batch size")
    ax.legend(fontsize=7)
    save(fig, "throughput.png")

    split = [(n, rs) for n, rs in series.items() if any("split" in r for r in rs) and not n.startswith("autoreg")]
    fig, axes = plt.subplots(1, max(len(split), 1), figsize=(4 * max(len(split), 1), 3.6), squeeze=False)
    for ax, (name, rs) in zip(axes[0], split):
        bottom = [0.0] * len(rs)
        labels = [str(r["batch"]) for r in rs]
        for phase in ("draft", "verify", "realign", "other"):
            values = [r["split"][phase] for r in rs]
            ax.bar(labels, values, bottom=bottom, label=phase)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set(xlabel="batch size", ylabel="share of decoding time", title=name)
    axes[0][0].legend(fontsize=7)
    save(fig, "time_split.png")

    exspec = {name: rs for name, rs in series.items() if rs[0]["method"] == "exspec"}
    if exspec:  # no EXSPEC in the run: no empty plot
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, rs in exspec.items():
            ax.plot([r["batch"] for r in rs], [r["group_rate"] for r in rs], marker="o", label=name)
        ax.set(xscale="log", xlabel="batch size", ylabel="rounds formed from one same-length group",
               title="EXSPEC group rate", ylim=(0, 1))
        ax.legend(fontsize=7)
        save(fig, "exspec_group_rate.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rs in series.items():
        rs = [r for r in rs if r.get("ideal")]
        if rs:
            line, = ax.plot([r["batch"] for r in rs], [r["vs_generate"] for r in rs], marker="o", label=f"{name} achieved")
            ax.plot([r["batch"] for r in rs], [r["ideal"] for r in rs], ls="--", color=line.get_color(),
                    label=f"{name} ideal")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="batch size", ylabel="speedup over transformers generate",
           title="Achieved against ideal (zero bookkeeping)")
    ax.legend(fontsize=7)
    save(fig, "achieved_vs_ideal.png")
    return written
