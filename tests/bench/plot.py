"""The benchmark plot (issue 9 item 4): one PNG, two panels, matplotlib as an optional extra.

Benchmarks record raw samples here while they run (`record_latency`, `record_spawns`); the
report calls `write()` at the end. Left panel: round-trip latency percentiles (p50/p90/p99/
p99.9) of each recorded series, e.g. bench_broker's goondan router vs the bare broker. Right
panel: spawn -> ready time vs the number of agents already live (bench_scale spawns 1,000 one
after another on a real daemon), every spawn as a dot plus the median of each bin.

matplotlib is imported only inside `write()`: without it the plot is skipped with a line that
says how to install it, and the report is written all the same.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
INSTALL_HINT = "pip install 'goondan-daemon[plot]'  (or: pip install 'matplotlib>=3.8')"

SpawnPoint = tuple[int, float]
"""(agents already live when the spawn was asked for, spawn -> ready in ms)."""


@dataclass(slots=True)
class Samples:
    latency_us: dict[str, list[float]] = field(default_factory=dict)
    spawns_ms: dict[str, list[SpawnPoint]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.latency_us and not self.spawns_ms


SAMPLES = Samples()
"""What this run's benchmarks recorded (one `python -m tests.bench` process)."""


def record_latency(label: str, samples_us: Sequence[float]) -> None:
    SAMPLES.latency_us.setdefault(label, []).extend(samples_us)


def record_spawns(label: str, points: Sequence[SpawnPoint]) -> None:
    SAMPLES.spawns_ms.setdefault(label, []).extend(points)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the two nearest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no samples")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentiles(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> list[float]:
    return [percentile(values, q) for q in qs]


def binned(points: Sequence[SpawnPoint], width: int) -> list[tuple[float, float]]:
    """(middle of the live-count bin, median spawn time) for each non-empty bin of `width`."""
    bins: dict[int, list[float]] = {}
    for live, ms in points:
        bins.setdefault(live // width, []).append(ms)
    return [(b * width + (width - 1) / 2, statistics.median(v)) for b, v in sorted(bins.items())]


def _latency_panel(ax: Any, series: dict[str, list[float]]) -> None:
    labels = [f"p{q:g}" for q in PERCENTILES]
    for name, values in series.items():
        ys = percentiles(values)
        ax.plot(labels, ys, marker="o", label=f"{name} (n={len(values):,})")
        for x, y in zip(labels, ys, strict=True):
            ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize="x-small")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("round trip (µs, log)")
    ax.set_title("brokered round trip: latency percentiles")
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no samples (bench_broker not run)", ha="center",
                transform=ax.transAxes)  # fmt: skip


def _spawn_panel(ax: Any, series: dict[str, list[SpawnPoint]]) -> None:
    ax.set_xlabel("agents already live")
    ax.set_ylabel("spawn -> ready (ms)")
    ax.grid(True, alpha=0.3)
    if not series:
        ax.set_title("spawn time vs live agents")
        ax.text(0.5, 0.5, "no samples (bench_scale not run)", ha="center",
                transform=ax.transAxes)  # fmt: skip
        return
    for i, (name, points) in enumerate(series.items()):
        color = f"C{i}"
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=4, alpha=0.3, color=color)
        width = max(1, (max(p[0] for p in points) + 1) // 40)
        line = binned(points, width)
        ax.plot([b[0] for b in line], [b[1] for b in line], color=color, linewidth=2,
                label=f"{name} (median per {width} live; dots: each spawn)")  # fmt: skip
    # the rare slow spawns would squash the medians into a flat line at the bottom
    top = percentile([ms for points in series.values() for _, ms in points], 99) * 1.2
    ax.set_ylim(0, max(top, 1.0))
    ax.set_title("spawn time vs live agents (y clipped at 1.2 x p99)")
    ax.legend(fontsize="small")


def write(path: Path, samples: Samples = SAMPLES) -> str:
    """Draw the PNG at `path`; return the line to print (written, or why it was skipped)."""
    if samples.empty():
        return "plot skipped: no benchmark recorded samples (run bench_broker or bench_scale)"
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a server
        import matplotlib.pyplot as plt
    except ImportError:
        return f"plot skipped: matplotlib is not installed; to get {path}: {INSTALL_HINT}"
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    _latency_panel(left, samples.latency_us)
    _spawn_panel(right, samples.spawns_ms)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot written to {path}"
