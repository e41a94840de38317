"""Ingress through any node: accepted = stored in the replicated stream, delivered by the
partition owner's consumer, answered through the node the client talks to."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.cluster.harness import StartDaemon, start_nodes, unique_swarm_bundle
from tests.cluster.natsd import NatsCluster


async def test_sends_through_every_node_reach_their_owners(
    start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    async with asyncio.timeout(60):
        nodes = await start_nodes(start_daemon, nats_cluster, bundle, tmp_path)
    async with asyncio.timeout(60):
        replies = await asyncio.gather(*(
            nodes[i % 3].send(f"hello {i}", key=f"user-{i}") for i in range(24)
        ))  # fmt: skip
    for i, reply in enumerate(replies):
        assert reply.ok, reply.error
        assert reply.result["input"] == f"caller: hello {i}"
    # a request across agents (and so, mostly, across nodes) comes back the same way
    async with asyncio.timeout(60):
        asked = await asyncio.gather(*(
            nodes[i % 3].send(f"req {i}", key=f"user-{i}") for i in range(12)
        ))  # fmt: skip
    for i, reply in enumerate(asked):
        assert reply.ok, reply.error
        assert f'"response":"worker: req {i}"' in reply.result["input"]
    served = {n: len(node.find("spawned")) for n, node in enumerate(nodes)}
    assert all(count > 0 for count in served.values()), served
