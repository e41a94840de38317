"""bench_scale's pure part: the daemon's log lines -> spawn series (`pytest tests/bench/`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.bench_scale import between, spawn_series


def _t(process: str, source: str, target: str, at: str) -> dict[str, Any]:
    return {
        "event": "transition", "process": process, "source": source, "target": target,
        "timestamp": f"2026-11-21T08:00:{at}Z",
    }  # fmt: skip


def test_spawn_series_pairs_asked_and_ready_and_counts_who_was_live() -> None:
    lines = [
        {"event": "started", "timestamp": "2026-11-21T08:00:00.000000Z"},
        _t("agent:echo:k0:1", "terminated", "spawning", "00.000000"),
        _t("agent:echo:k0:1", "spawning", "idle", "00.004000"),
        _t("agent:echo:k0:1", "idle", "processing", "00.005000"),
        _t("agent:echo:k1:1", "terminated", "spawning", "00.010000"),
        _t("agent:echo:k2:1", "terminated", "spawning", "00.011000"),  # asked before k1 ready
        _t("agent:echo:k1:1", "spawning", "idle", "00.016000"),
        _t("agent:echo:k2:1", "spawning", "idle", "00.020000"),
        _t("agent:echo:k3:1", "terminated", "spawning", "00.030000"),  # never ready: left out
    ]
    series = spawn_series(lines)
    assert [live for live, _ in series] == [0, 1, 1]
    assert [ms for _, ms in series] == pytest.approx([4.0, 6.0, 9.0], abs=1e-3)


def test_between_takes_the_live_range_low_inclusive_high_exclusive() -> None:
    points = [(0, 1.0), (5, 2.0), (9, 3.0), (10, 4.0)]
    assert between(points, 1, 10) == [2.0, 3.0]
    assert between(points, 9, 11) == [3.0, 4.0]
