"""Studio's cost to the daemon: its CPU with Studio open vs without, on many live agents.

A real daemon (bench_scale's one-agent bundle) brings up GOONDAN_BENCH_STUDIO agents (default
GOONDAN_BENCH_SCALE, 1000) with one event each, then sits idle (heartbeats only). A real
`goondan studio` runs beside it. The daemon's CPU is read over WINDOW seconds, alternately
with no page open and with one page open (an SSE client on /api/stream/processes, which makes
Studio ask the daemon for its process table every second), ROUNDS times each; the figure is
the median with a page open, its baseline the median without (goal: ≤ 1.2x).

Run: `python -m tests.bench bench_studio`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows
from tests.bench.bench_scale import BUNDLE, ROOT
from tests.bench.scale_clients import Control

AGENTS = int(os.environ.get("GOONDAN_BENCH_STUDIO", os.environ.get("GOONDAN_BENCH_SCALE", "1000")))
WINDOW = 6.0
ROUNDS = 3


@contextlib.asynccontextmanager
async def _page(base: str, headers: dict[str, str]) -> AsyncIterator[None]:
    """An open Studio page: an SSE client reading the process table as it comes."""
    import httpx

    async with (
        httpx.AsyncClient(timeout=None, headers=headers) as http,
        http.stream("GET", f"{base}api/stream/processes") as response,
    ):
        lines = response.aiter_lines()

        async def read() -> None:
            async for _ in lines:
                pass

        reader = asyncio.ensure_future(read())
        try:
            yield
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def _cpu(pid: int) -> float:
    """% of one core the process used over WINDOW (a window of waiting: nothing to await)."""
    import psutil

    proc = psutil.Process(pid)
    before = proc.cpu_times()
    await asyncio.sleep(WINDOW)
    after = proc.cpu_times()
    return 100 * ((after.user + after.system) - (before.user + before.system)) / WINDOW


async def _drive(directory: Path) -> tuple[list[float], list[float]]:
    from orchestrator.control.rundir import read_active
    from protocol.endpoints import StateLayout
    from tests.integration.harness import Daemon
    from tests.integration.studio_harness import studio

    bundle = directory / "goondan.yaml"
    bundle.write_text(BUNDLE)
    daemon = await Daemon.start(bundle, swarm="scale")
    control = None
    try:
        active = read_active(StateLayout.from_env().run_paths("scale").active_json)
        assert active is not None, "the daemon wrote no active.json"
        control = Control(active.endpoints["control"])
        async with asyncio.timeout(1800):
            for i in range(AGENTS):
                await control.send(f"k{i}", "hello")
            closed, opened = [], []
            async with studio("--swarm", "scale") as s:
                for _ in range(ROUNDS):
                    closed.append(await _cpu(daemon.pid))
                    async with _page(s.base + "/", s.headers):
                        opened.append(await _cpu(daemon.pid))
            return closed, opened
    finally:
        if control is not None:
            control.close()
        await daemon.close()


def run() -> list[Row]:
    saved = os.environ.get("GOONDAN_STATE_ROOT")
    try:
        with tempfile.TemporaryDirectory(prefix="gst", dir=ROOT) as tmp:
            os.environ["GOONDAN_STATE_ROOT"] = str(Path(tmp) / "s")
            closed, opened = asyncio.run(_drive(Path(tmp)))
    finally:
        if saved is None:
            os.environ.pop("GOONDAN_STATE_ROOT", None)
        else:
            os.environ["GOONDAN_STATE_ROOT"] = saved
    base = statistics.median(closed)
    return [
        Row(
            f"daemon CPU, {AGENTS:,} idle agents, no Studio page open",
            base,
            p99(closed),
            "% core",
            base,
        ),
        Row(
            f"daemon CPU, {AGENTS:,} idle agents, one Studio page open (SSE)",
            statistics.median(opened),
            p99(opened),
            "% core",
            base,
            "≤ 1.2x",
        ),
    ]


def main() -> list[Row]:
    rows = run()
    title = (
        f"studio: the daemon's CPU over {WINDOW:g} s windows, {ROUNDS} each, alternating "
        f"no page / one page open, {AGENTS:,} live agents"
    )
    print_rows(title, rows)
    return rows
