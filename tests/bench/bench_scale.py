"""Scale (issue 9 item 5): 1,000 agent instances on one real daemon, one event each.

A real `goondan run` daemon (fork server, default heartbeats) runs a one-agent bundle with a
scripted model. Everything goes through the control socket like `goondan send`: one DEALER
stays connected and sends a `SendText` with `wait`, so each round trip is control ROUTER ->
router (process table, open-request book, mailbox) -> agent turn -> router -> control reply.

1. Bring up: instance keys k0..k9 get one event each, one after another (the first event
   spawns the instance); later k10..k999 the same way. The daemon's log gives every spawn's
   spawn -> ready time and how many agents were live then (the plot's right panel).
2. Routing at 10 vs 1,000 live: the same probe both times, PROBE_ROUNDS round trips to each
   of 10 warm instances that have had exactly one event (k0..k9 with 10 live, the last ten
   keys with 1,000 live), each followed by a control `ping` (the daemon's own loop, no
   agent). The 10-live figures are the baseline: ratio = 1,000 live / 10 live.
3. Memory: USS and PSS of every agent process (psutil), the orchestrator's RSS at 10 and at
   1,000 live.

Run: `python -m tests.bench bench_scale` (GOONDAN_BENCH_SCALE=N sets how many agents;
default 1000). Figures on a shared machine are noisy: trust the ratios more.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.bench import plot
from tests.bench.baselines import Row, p99, print_rows

AGENTS = int(os.environ.get("GOONDAN_BENCH_SCALE", "1000"))
FEW = 10
PROBE_ROUNDS = 30
MIB = 1024 * 1024
ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
BUNDLE = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: script}
spec: {provider: scripted, model: scale, options: {script: [{reply: "pong {input}"}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: echo}
spec: {modelConfig: {modelRef: Model/script}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: scale}
spec: {entryAgent: Agent/echo, agents: [Agent/echo]}
"""


# -- pure: the daemon's log -> spawn series --------------------------------------------------


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def spawn_series(lines: Iterable[dict[str, Any]]) -> list[plot.SpawnPoint]:
    """(agents live when it was asked for, spawn -> ready ms) per spawn, in spawn order.

    From the daemon's `transition` log lines: `-> spawning` is when the supervisor was asked,
    `spawning -> idle` is the child's `ready`. Live = spawns that were ready before this one
    was asked for (no agent exits during the benchmark, so none is subtracted)."""
    asked: dict[str, float] = {}
    ready: dict[str, float] = {}
    for line in lines:
        if line.get("event") != "transition":
            continue
        process, at = str(line["process"]), _seconds(line["timestamp"])
        if line["target"] == "spawning":
            asked[process] = at
        elif line["source"] == "spawning" and line["target"] == "idle":
            ready[process] = at
    ready_times = sorted(ready.values())
    return [
        (bisect.bisect_left(ready_times, t0), (ready[p] - t0) * 1000)
        for p, t0 in sorted(asked.items(), key=lambda kv: kv[1])
        if p in ready
    ]


def split_by_live(points: Iterable[plot.SpawnPoint], below: int, at_least: int) -> tuple[
    list[float], list[float]
]:  # fmt: skip
    """Spawn times with fewer than `below` live, and with at least `at_least` live."""
    points = list(points)
    return [ms for live, ms in points if live < below], [
        ms for live, ms in points if live >= at_least
    ]


# -- the driver --------------------------------------------------------------------------------


class Control:
    """One DEALER kept connected to control.sock: a round trip is not a connect each time."""

    def __init__(self, endpoint: str) -> None:
        import zmq
        import zmq.asyncio

        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.n = 0

    async def call(self, req: Any) -> tuple[Any, float]:
        """(reply, round trip in µs); one request in flight at a time."""
        from protocol.codec import decode_control_reply, encode

        start = time.perf_counter()
        await self.sock.send(encode(req))
        reply = decode_control_reply(await self.sock.recv())
        elapsed = (time.perf_counter() - start) * 1e6
        if reply.request_id != req.request_id or not reply.ok:
            raise RuntimeError(f"control {req.request_id}: {reply}")
        return reply, elapsed

    async def send(self, key: str, text: str) -> float:
        from protocol.control import SendText

        self.n += 1
        req = SendText(request_id=f"s{self.n}", text=text, instance_key=key, timeout_ms=60_000)
        return (await self.call(req))[1]

    async def ping(self) -> float:
        from protocol.control import Ping

        self.n += 1
        return (await self.call(Ping(request_id=f"p{self.n}")))[1]

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@dataclass(slots=True)
class Probe:
    rtt_us: list[float]
    ping_us: list[float]
    orchestrator_rss: int


async def _probe(control: Control, keys: list[str], daemon_pid: int) -> Probe:
    import psutil

    out = Probe([], [], 0)
    for r in range(PROBE_ROUNDS):
        for key in keys:
            out.rtt_us.append(await control.send(key, f"probe {r}"))
            out.ping_us.append(await control.ping())
    out.orchestrator_rss = psutil.Process(daemon_pid).memory_info().rss
    return out


async def _bring_up(control: Control, keys: list[str]) -> list[float]:
    """One event to each new instance, one after another: send -> reply in ms."""
    return [await control.send(key, "hello") / 1000 for key in keys]


def _memory(pids: list[int]) -> tuple[list[float], list[float]]:
    """(USS, PSS) in MiB of each live agent process."""
    import psutil

    uss, pss = [], []
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        uss.append(info.uss / MIB)
        pss.append(info.pss / MIB)
    return uss, pss


@dataclass(slots=True)
class Run:
    bring_up_ms: list[float]
    bring_up_s: float
    few: Probe
    many: Probe
    live: int
    uss: list[float]
    pss: list[float]
    spawns: list[plot.SpawnPoint]


async def _drive(bundle: Path, state: Path) -> Run:
    from protocol.endpoints import StateLayout
    from tests.integration.harness import Daemon

    os.environ["GOONDAN_STATE_ROOT"] = str(state)
    daemon = await Daemon.start(bundle, swarm="scale")
    info = StateLayout.from_env().run_paths("scale")
    control = None
    try:
        from orchestrator.rundir import read_active

        active = read_active(info.active_json)
        assert active is not None, "the daemon wrote no active.json"
        control = Control(active.endpoints["control"])
        keys = [f"k{i}" for i in range(AGENTS)]
        start = time.perf_counter()
        bring_up = await _bring_up(control, keys[:FEW])
        first = time.perf_counter() - start
        few = await _probe(control, keys[:FEW], daemon.pid)
        start = time.perf_counter()
        bring_up += await _bring_up(control, keys[FEW:])
        rest = time.perf_counter() - start
        many = await _probe(control, keys[-FEW:], daemon.pid)
        status = await daemon.status()
        pids = [p.pid for p in status.processes if p.pid and p.status in {"idle", "processing"}]
        uss, pss = _memory(pids)
        spawns = spawn_series(daemon.lines)
        return Run(bring_up, first + rest, few, many, len(pids), uss, pss, spawns)
    finally:
        if control is not None:
            control.close()
        await daemon.close()


def _row(name: str, values: list[float], unit: str, base: float | None, goal: str = "") -> Row:
    return Row(name, statistics.median(values), p99(values), unit, base, goal)


def _rows(run: Run) -> list[Row]:
    n, few, many = f"{AGENTS:,}", run.few, run.many
    rtt10, ping10 = statistics.median(few.rtt_us), statistics.median(few.ping_us)
    firsts = statistics.median(run.bring_up_ms[:FEW])
    early, late = split_by_live(run.spawns, FEW * 10, int(AGENTS * 0.9))
    base_spawn = statistics.median(early) if early else None
    rss10, rss_n = few.orchestrator_rss / MIB, many.orchestrator_rss / MIB
    rows = [
        Row(
            f"agents live after one event each ({run.bring_up_s:.1f} s in all)",
            run.live,
            None,
            "agents",
            None,
            "1,000",
        ),
        _row("send -> reply per new agent (spawn + turn)", run.bring_up_ms, "ms", firsts),
        _row(f"spawn -> ready, < {FEW * 10} live", early, "ms", base_spawn, "≤ 10 ms p50"),
        _row(
            f"spawn -> ready, ≥ {int(AGENTS * 0.9):,} live", late, "ms", base_spawn, "≤ 10 ms p50"
        ),
        _row(f"round trip control -> agent -> reply, {FEW} live", few.rtt_us, "µs", rtt10),
        _row(
            f"round trip control -> agent -> reply, {n} live", many.rtt_us, "µs", rtt10, "≤ 1.25x"
        ),
        Row(
            f"  p99 of it, {n} live (baseline: p99 at {FEW} live)",
            p99(many.rtt_us),
            None,
            "µs",
            p99(few.rtt_us),
            "≤ 2x",
        ),
        _row(f"control ping (no agent), {FEW} live", few.ping_us, "µs", ping10),
        _row(f"control ping (no agent), {n} live", many.ping_us, "µs", ping10),
        _row("USS per agent (after its events)", run.uss, "MiB", None, "≤ 6 MiB"),
        _row("PSS per agent (after its events)", run.pss, "MiB", None),
        Row(f"orchestrator RSS, {n} live (baseline: {FEW} live)", rss_n, None, "MiB", rss10),
        Row(
            "orchestrator RSS per extra live agent",
            (rss_n - rss10) * 1024 / (AGENTS - FEW),
            None,
            "KiB",
        ),
    ]
    return rows


def run() -> list[Row]:
    if AGENTS <= FEW * 10:
        raise ValueError(f"GOONDAN_BENCH_SCALE must be > {FEW * 10} (got {AGENTS})")
    with tempfile.TemporaryDirectory(prefix="gsc", dir=ROOT) as tmp:
        bundle = Path(tmp) / "goondan.yaml"
        bundle.write_text(BUNDLE)
        saved = os.environ.get("GOONDAN_STATE_ROOT")
        try:
            result = asyncio.run(_drive(bundle, Path(tmp) / "s"))
        finally:
            if saved is None:
                os.environ.pop("GOONDAN_STATE_ROOT", None)
            else:
                os.environ["GOONDAN_STATE_ROOT"] = saved
    plot.record_spawns("real daemon, fork server, one after another", result.spawns)
    return _rows(result)


def main() -> list[Row]:
    rows = run()
    print_rows(
        f"scale: {AGENTS:,} agents on one daemon (fork server), one event each through the "
        f"control socket; routing probed with {FEW} and {AGENTS:,} live ({PROBE_ROUNDS} x {FEW} "
        f"round trips each)",
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
