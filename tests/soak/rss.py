"""RSS sampling and the growth verdict: a least-squares line over the second half of a run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import psutil

MIB = 1024 * 1024


def rss_mib(pids: list[int]) -> float | None:
    """Summed RSS of the processes, or None if one of them is gone (a sample to skip)."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            return None
    return total / MIB


@dataclass(frozen=True, slots=True)
class Growth:
    start_mib: float
    end_mib: float
    slope_kib_s: float
    relative: float
    """Fitted growth over the second half as a fraction of its fitted start."""


def growth(samples: list[tuple[float, float]]) -> Growth:
    """Fit RSS = a + b*t over the second half (the first half is warm-up)."""
    half = samples[len(samples) // 2 :]
    ts = [t for t, _ in half]
    ys = [y for _, y in half]
    slope, intercept = statistics.linear_regression(ts, ys)
    start, end = intercept + slope * ts[0], intercept + slope * ts[-1]
    return Growth(ys[0], ys[-1], slope * 1024, (end - start) / start if start else 0.0)
