"""Soak: steady inter-agent traffic for SOAK_SECONDS (default 60); RSS of the orchestrator and
of the agent processes sampled every second; sustained growth (> 10 % over the second half, by
a linear fit: the first half is warm-up) fails. Not part of `make test`: `make soak`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

from tests.chaos.load import Books, Control, requester
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO
from tests.soak import rss

BUNDLE = REPO / "tests" / "soak" / "bundle"
SWARM = "soak"
SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
KEYS = ["k0", "k1"]
LIMIT = 0.10


async def sample(
    control: Control, daemon_pid: int, stop: asyncio.Event
) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = {"orchestrator": [], "agents": []}
    start = time.monotonic()
    while not stop.is_set():
        status = await control.status()
        agents = [p.pid for p in status.processes if p.kind == "agent" and p.pid]
        now = time.monotonic() - start
        for name, pids in (("orchestrator", [daemon_pid]), ("agents", agents)):
            value = await asyncio.to_thread(rss.rss_mib, pids)
            if value is not None and pids:
                series[name].append((now, value))
        with contextlib.suppress(TimeoutError):  # the sampling period
            await asyncio.wait_for(stop.wait(), 1.0)
    return series


async def test_rss_does_not_grow_under_steady_traffic(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(SECONDS + 60):
        daemon = await start_daemon(BUNDLE, swarm=SWARM)
        control = Control(SWARM)
        books, stop = Books(), asyncio.Event()
        try:
            for key in KEYS:  # every agent up before the first sample
                await daemon.send("req warm", "caller", key=key)
            load = [asyncio.ensure_future(requester(control, books, KEYS, stop)) for _ in KEYS]
            sampler = asyncio.ensure_future(sample(control, daemon.pid, stop))
            await asyncio.sleep(SECONDS)  # the soak's duration is the point, not a wait
            stop.set()
            await asyncio.gather(*load)
            series = await sampler
        finally:
            stop.set()
            control.close()
        verdicts = {name: rss.growth(points) for name, points in series.items()}
        for name, g in verdicts.items():
            print(
                f"\nsoak {name}: {g.start_mib:.1f} -> {g.end_mib:.1f} MiB over the second half, "
                f"slope {g.slope_kib_s:+.1f} KiB/s, fitted growth {g.relative:+.1%}"
            )
        print(f"soak traffic: {books.requests} requests in {SECONDS:.0f} s, {dict(books.outcomes)}")
        assert not books.hangs, books.hangs[:5]
        assert books.outcomes["ok"] > 0
        assert all(len(points) >= 4 for points in series.values()), series
        for name, g in verdicts.items():
            assert g.relative <= LIMIT, f"{name} RSS grew {g.relative:.1%} after warm-up"
