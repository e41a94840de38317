"""Benchmark: cluster mode on one machine (3 NATS servers + 3 goondan nodes on loopback).

- `agents__request` across nodes vs on the same node, in the same run and the same cluster,
  one request at a time:
  the caller's tool call (`durationMs` of its `tool.completed` runtime event), by whether the
  worker instance of its key runs on the caller's node. Goal ≤ 2x the same-node median.
- failover: SIGKILL of the node holding the most instances, then one send to each of its
  instances through the survivors; the time from the kill to the first and to every answer.
  Baseline: the lease TTL (a node's partitions cannot move before its leases expire). Goal
  ≤ 6 s.

Needs nats-server (`apt-get install -y nats-server`); without it this prints why and skips.
Run: `python -m tests.bench bench_cluster`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.endpoints import StateLayout
from tests.bench.baselines import Row, p99, print_rows

if TYPE_CHECKING:
    from tests.integration.harness import Daemon

KEYS = [f"b{i}" for i in range(36)]
PER_KEY = 6
"""Requests measured per key after one warm-up (the first spawns both processes)."""
TTL = 2.0
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


async def _drive(tmp: Path, urls: str) -> list[Row]:
    from tests.integration.harness import Daemon

    bundle = tmp / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    nodes: list[Daemon] = []
    try:
        for name in ("n1", "n2", "n3"):
            root = tmp / name
            root.mkdir()
            nodes.append(await Daemon.start(
                bundle / "goondan.yaml", swarm="bench", state_root=root,
                args=("--cluster", urls, "--node", name),
            ))  # fmt: skip
        for node in nodes:
            await node.wait_for("cluster_settled")
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
        rows = _request_rows(same, cross)
        rows.append(await _failover(nodes, roots))
        return rows
    finally:
        for node in nodes:
            await node.close()


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
    if shutil.which("nats-server") is None and not Path("/usr/sbin/nats-server").exists():
        print("skipped: nats-server is not installed (apt-get install -y nats-server)")
        return []
    from tests.cluster.natsd import NatsCluster

    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    with tempfile.TemporaryDirectory(prefix="gcl") as tmp:
        (Path(tmp) / "nats").mkdir()
        nats = NatsCluster.create(binary, Path(tmp) / "nats")
        nats.start_all()
        try:
            return asyncio.run(_drive(Path(tmp), nats.urls))
        finally:
            nats.stop_all()


def main() -> list[Row]:
    rows = run()
    print_rows("cluster mode (3 NATS servers + 3 nodes, one machine)", rows)
    return rows


if __name__ == "__main__":
    main()
