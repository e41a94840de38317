"""A 4th node joins under load: it takes the partitions rendezvous hashing gives it (about a
quarter), the others hand them over after their running turns (never two live processes of one
instance), and every acknowledged event is in its conversation exactly once."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime
from pathlib import Path

from orchestrator.cluster.names import partition_of, plan
from tests.cluster.harness import (
    FreshSwarm,
    Progress,
    StartDaemon,
    read_history,
    start_node,
    user_texts,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon, LogLine

PARTITIONS = 12
KEYS = [f"j{i}" for i in range(16)]


def at(line: LogLine) -> float:
    return datetime.fromisoformat(line["timestamp"]).timestamp()


async def load(
    nodes: list[Daemon], stop: asyncio.Event, sent: dict[str, list[str]], progress: Progress
) -> None:
    for n in itertools.count():
        if stop.is_set():
            return
        key = KEYS[n % len(KEYS)]
        text = f"w{n} {key}"
        reply = await nodes[n % len(nodes)].send(text, key=key)
        assert reply.ok, reply.error
        sent[key].append(text)
        await progress.add()


async def test_a_joining_node_takes_its_share_without_loss(
    fresh: FreshSwarm, start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = fresh.bundle
    swarm = fresh.swarm
    nodes = fresh.nodes
    sent: dict[str, list[str]] = {k: [] for k in KEYS}
    stop = asyncio.Event()
    progress = Progress()
    senders = [asyncio.ensure_future(load(nodes, stop, sent, progress)) for _ in range(3)]
    async with asyncio.timeout(90):
        await progress.reached(30)
        joined_at = time.monotonic()
        marks = [n.mark() for n in nodes]
        fourth = await start_node(start_daemon, nats_cluster, bundle, "n4", tmp_path)
        for node in [*nodes, fourth]:
            await node.wait_for("cluster_settled", nodes=4)
        settled = time.monotonic() - joined_at
        stop.set()
        await asyncio.gather(*senders)
    print(f"\njoin: settled {settled:.2f} s after the 4th node started")

    mine = {p for p, n in plan(PARTITIONS, ["n1", "n2", "n3", "n4"]).items() if n == "n4"}
    gained = {line["partition"] for line in fourth.find("partition_gained")}
    assert gained == mine and 1 <= len(mine) <= PARTITIONS // 2
    released = [line["partition"] for n, m in zip(nodes, marks, strict=True)
                for line in n.find("partition_released", m)]  # fmt: skip
    assert sorted(released) == sorted(mine)  # handed over, none lapsed
    assert not any(n.find("lease_lapsed") for n in [*nodes, fourth])

    # never two live processes of one instance: the old one ended before the new one started
    for key in KEYS:
        for agent in ("caller",):
            if partition_of(agent, key, PARTITIONS) not in mine:
                continue
            started = fourth.find("spawned", process=f"agent:{agent}:{key}:1")
            ended = [line for n in nodes
                     for line in n.find("transition", target="terminated")
                     if line["process"].startswith(f"agent:{agent}:{key}:")]  # fmt: skip
            if started and ended:
                assert max(map(at, ended)) <= at(started[0]), key

    async with asyncio.timeout(30):
        for key in KEYS:
            texts = user_texts(await read_history(nats_cluster, swarm, "caller", key))
            assert sorted(texts) == sorted(sent[key]), key  # each acknowledged send once
