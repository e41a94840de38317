"""Starting agents: spawn -> ready (fork server and cold), crash -> replacement ready, USS per
idle agent, and how many idle agents this machine holds, against bare baselines of the run.

Ours are real agent processes of `bundles/examples/hello` (bundle, runtime, scripted model,
DEALER, handshake) started by the real supervisor and spawner. Each mode runs in its own
process (`python -m tests.bench.bench_spawn measure MODE`) so the fork server is forked before
that process has a zmq Context or a loop, as in the daemon. The bare baselines (ARCHITECTURE.md §8
items 4 and 5: a zygote fork / a fresh interpreter that imports the stack, connects a DEALER
and says ready) are measured by the driver in the same run.

Run: `python -m tests.bench.bench_spawn` (GOONDAN_BENCH_HOLD=N sets how many idle agents to
hold; default 1000).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

from tests.bench.baselines import Row, p99, print_rows

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "bundles" / "examples" / "hello" / "goondan.yaml"
# the same greeter on the `openai` provider (SDK client built, never called): what a real
# agent's model client adds to its private memory
OPENAI_MODEL = """apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec: {provider: openai, model: idle, endpoint: "http://127.0.0.1:9/v1", apiKey: {value: sk-x}}
"""
SPAWNS = {"forkserver": 20, "cold": 8}
CRASHES = 10
MIB = 1024 * 1024


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def launch_settings(layout: Any, bundle: Any) -> Any:
    """What the daemon's children of `bundle` are started with, as the daemon builds it."""
    from protocol.launch import LaunchSettings

    swarm = bundle.swarm().name
    return LaunchSettings(
        endpoint=layout.run_paths(swarm).agents_endpoint, swarm=swarm, bundle=str(bundle.path),
        state_root=str(layout.root), heartbeat_interval=1.0, heartbeat_timeout=60.0,
    )  # fmt: skip


def start_server(bundle: Any, layout: Any) -> Any:
    """The fork server as the daemon starts it: call before this process has a zmq Context,
    a thread or a loop."""
    from orchestrator.supervision.forkserver import ENTRY, start_fork_server

    context = {"bundle": bundle, "launch": launch_settings(layout, bundle)}
    return start_fork_server(ENTRY, context=context)


class Harness:
    """The daemon's supervisor, router and spawner, with a future per awaited `ready`."""

    def __init__(
        self,
        mode: str,
        server: Any,
        layout: Any,
        bundle: Any,
        agents: tuple[str, ...] = ("greeter",),
        journal: Any = None,
    ) -> None:
        """`journal`: events are accepted through it (`harness.acceptor`, an
        `orchestrator.ingress.accept.Acceptor`), for benchmarks of the journaled path."""
        import zmq.asyncio

        from orchestrator.ingress.accept import Acceptor
        from orchestrator.ingress.direct import DirectIngress
        from orchestrator.routing.placement import LocalPlacement
        from orchestrator.routing.relay import Relay
        from orchestrator.supervision.mailboxes import Mailboxes
        from orchestrator.supervision.settings import Settings
        from orchestrator.supervision.spawner import ColdSpawner, ForkServerSpawner, Spawner
        from orchestrator.supervision.states import ProcessStatus
        from orchestrator.supervision.supervisor import Supervisor
        from orchestrator.supervision.table import ProcessTable
        from orchestrator.swarm.view import CurrentSwarm, SwarmView
        from tests.unit.orchestrator.fakes import build_router

        self.waiters: dict[Any, asyncio.Future[float]] = {}
        self.agents = agents

        def listener(entry: Any, source: ProcessStatus, target: ProcessStatus) -> None:
            if target is ProcessStatus.IDLE and source is ProcessStatus.SPAWNING:
                fut = self.waiters.pop(entry.address, None)
                if fut is not None:
                    fut.set_result(time.perf_counter())

        swarm = bundle.swarm()
        paths = layout.run_paths(swarm.name)
        paths.run_dir.mkdir(parents=True, exist_ok=True)
        self.table = ProcessTable(listener=listener)
        relay, mailboxes = Relay(), Mailboxes()
        spawner: Spawner = ColdSpawner()
        if mode == "forkserver":
            spawner = ForkServerSpawner(server, ColdSpawner())
        self.spawner = spawner
        settings = Settings(grace_period=5.0, heartbeat_interval=1.0, heartbeat_timeout=60.0)
        view = SwarmView(name=swarm.name, entry_agent=agents[0],
                         default_instance_key=swarm.name, members=agents)  # fmt: skip
        self.supervisor = Supervisor(
            table=self.table, mailboxes=mailboxes, deliveries=relay,
            placement=LocalPlacement(relay.deliver_response), spawner=spawner, settings=settings,
            launch=launch_settings(layout, bundle), layout=layout, swarm=CurrentSwarm(view),
        )  # fmt: skip
        self.acceptor: Any = (
            Acceptor(journal, relay.submit) if journal is not None else DirectIngress(relay.submit)
        )
        self.router = build_router(zmq.asyncio.Context(), paths.agents_endpoint, self.table,
                                   self.supervisor, mailboxes=mailboxes, relay=relay,
                                   ingress=self.acceptor)  # fmt: skip
        self.tasks = [asyncio.ensure_future(self.router.run())]

    def _await_ready(self, address: Any) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[address] = fut
        return fut

    async def spawn(self, key: str, agent: str | None = None) -> float:
        """Start `agent` (default: the first) at `key`; ms until it is ready."""
        from protocol.ids import agent_address

        address = agent_address(agent or self.agents[0], key)
        fut = self._await_ready(address)
        start = time.perf_counter()
        self.supervisor.ensure(address)
        return (await fut - start) * 1000

    async def crash(self, entry: Any) -> float:
        fut = self._await_ready(entry.address)
        start = time.perf_counter()
        self.supervisor.kill(entry)
        return (await fut - start) * 1000

    async def close(self) -> None:
        await self.supervisor.shutdown_all()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.router.close()
        await self.spawner.close()


def uss_mib(pids: list[int]) -> list[float]:
    import psutil

    return [psutil.Process(pid).memory_full_info().uss / MIB for pid in pids]


async def _measure(mode: str, server: Any, layout: Any, bundle: Any, hold: int) -> dict[str, Any]:
    h = Harness("forkserver" if server else mode, server, layout, bundle)
    out: dict[str, Any] = {"spawn_ms": [], "crash_ms": []}
    try:
        async with asyncio.timeout(600):
            await h.spawn("warm-up")
            if mode == "forkserver-openai":
                return await _uss_only(h)
            for i in range(SPAWNS[mode]):
                out["spawn_ms"].append(await h.spawn(f"s{i}"))
            live = [e for e in h.table.live() if e.address.instance_key != "warm-up"]
            out["uss_mib"] = uss_mib([e.pid for e in live if e.pid])
            for entry in live[:CRASHES]:
                out["crash_ms"].append(await h.crash(entry))
            if mode == "forkserver" and hold:
                out.update(await _hold(h, hold))
    finally:
        await h.close()
    return out


async def _uss_only(h: Harness) -> dict[str, Any]:
    for i in range(SPAWNS["cold"]):
        await h.spawn(f"s{i}")
    live = [e for e in h.table.live() if e.address.instance_key != "warm-up"]
    return {"uss_mib": uss_mib([e.pid for e in live if e.pid])}


async def _hold(h: Harness, count: int) -> dict[str, Any]:
    before = _mem_available()
    start = time.perf_counter()
    for batch in range(0, count, 25):
        await asyncio.gather(*(h.spawn(f"h{i}") for i in range(batch, min(count, batch + 25))))
    seconds = time.perf_counter() - start
    await asyncio.sleep(2.0)  # let the held agents settle (first heartbeats, page faults)
    held = [e for e in h.table.live() if e.address.instance_key.startswith("h")]
    growth = (before - _mem_available()) / len(held)
    return {"held": len(held), "hold_seconds": seconds, "hold_growth_mib": growth / MIB}


def _openai_bundle(directory: Path) -> Path:
    """hello with its Model document swapped for an `openai` one."""
    docs = HELLO.read_text().split("\n---\n")
    docs = [OPENAI_MODEL if "kind: Model\n" in doc else doc for doc in docs]
    path = directory / "goondan.yaml"
    path.write_text("\n---\n".join(docs))
    return path


def measure(mode: str, hold: int) -> None:
    """Runs in a fresh process: fork server first, then the loop. Mode `forkserver-openai`
    only measures USS, for the greeter on the `openai` provider."""
    import structlog
    import uvloop

    from bundles.loader import load_bundle
    from protocol.endpoints import StateLayout

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    with tempfile.TemporaryDirectory(prefix="gs", dir="/tmp") as tmp:
        layout = StateLayout(root=Path(tmp))
        path = _openai_bundle(Path(tmp)) if mode == "forkserver-openai" else HELLO
        bundle = load_bundle(path, state_root=layout.root)
        server = None
        if mode.startswith("forkserver"):
            server = start_server(bundle, layout)
        result = uvloop.run(_measure(mode, server, layout, bundle, hold))
    print(json.dumps(result), flush=True)


# -- the driver ------------------------------------------------------------------------------


def _bare(kind: str, n: int) -> list[float]:
    """The bare baselines of ARCHITECTURE.md §8 in this run: zygote fork -> ready, or a fresh
    interpreter -> ready."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    samples = []
    with tempfile.TemporaryDirectory(prefix="gz", dir="/tmp") as tmp:
        endpoint = f"ipc://{tmp}/z.sock"
        router.bind(endpoint)
        base = [sys.executable, "-m", "tests.bench.baselines"]
        zygote = None
        if kind == "zygote":
            zygote = subprocess.Popen([*base, "zygote", endpoint], stdin=subprocess.PIPE, text=True)
        try:
            for i in range(n + 1):  # the first one also waits for the zygote's own start
                start = time.perf_counter()
                child = None
                if zygote is not None:
                    assert zygote.stdin is not None
                    zygote.stdin.write(f"c{i}\n")
                    zygote.stdin.flush()
                else:
                    child = subprocess.Popen([*base, "cold", endpoint, f"c{i}"])
                ident, _ = router.recv_multipart()
                if i:
                    samples.append((time.perf_counter() - start) * 1000)
                router.send_multipart([ident, b"bye"])
                if child is not None:
                    child.wait()
        finally:
            if zygote is not None:
                zygote.kill()
                zygote.wait()
            router.close(linger=0)
            ctx.term()
    return samples


def _ours(mode: str, hold: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.bench_spawn", "measure", mode, str(hold)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"bench_spawn {mode} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _row(name: str, values: list[float], unit: str, base: float | None, goal: str = "") -> Row:
    return Row(name, statistics.median(values), p99(values), unit, base, goal)


def main() -> list[Row]:
    hold = int(os.environ.get("GOONDAN_BENCH_HOLD", "1000"))
    zygote = _bare("zygote", 20)
    cold = _bare("cold", 8)
    fork = _ours("forkserver", hold)
    slow = _ours("cold", 0)
    sdk = _ours("forkserver-openai", 0)
    z, c = statistics.median(zygote), statistics.median(cold)
    rows = [
        _row("bare zygote fork -> ready", zygote, "ms", z),
        _row(
            "spawn -> ready, fork server (real agent)",
            fork["spawn_ms"],
            "ms",
            z,
            "≤ 10 ms p50, ≤ 1.5x",
        ),
        _row("bare cold interpreter -> ready", cold, "ms", c),
        _row("spawn -> ready, cold (real agent)", slow["spawn_ms"], "ms", c),
        _row("crash -> replacement ready, fork server", fork["crash_ms"], "ms", z, "≤ 15 ms"),
        _row("crash -> replacement ready, cold", slow["crash_ms"], "ms", c),
        _row("USS per idle agent, fork server", fork["uss_mib"], "MiB", None, "≤ 5.5 MiB"),
        _row("USS per idle agent, cold", slow["uss_mib"], "MiB", None),
        _row("USS per idle agent, fork server, openai provider", sdk["uss_mib"], "MiB", None),
    ]
    if "held" in fork:
        per_agent = fork["hold_growth_mib"]
        rows.append(Row(f"idle agents held (spawned in {fork['hold_seconds']:.1f} s)",
                        fork["held"], None, "agents", None, "1,000"))  # fmt: skip
        rows.append(Row("machine memory per held agent", per_agent, None, "MiB", None))
        fits = _mem_available() / MIB / per_agent if per_agent > 0 else 0.0
        rows.append(Row("idle agents that fit in MemAvailable", fits, None, "agents", None))
    print_rows("starting agents (real agent processes of bundles/examples/hello)", rows)
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure(sys.argv[2], int(sys.argv[3]))
    else:
        main()
