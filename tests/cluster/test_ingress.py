"""Ingress through any node: accepted = stored in the replicated stream, delivered by the
partition owner's consumer, answered through the node the client talks to."""

from __future__ import annotations

import asyncio

from tests.cluster.harness import (
    FreshSwarm,
    owner_of,
    read_history,
    user_texts,
)
from tests.cluster.natsd import NatsCluster


async def test_sends_through_every_node_reach_their_owners(fresh: FreshSwarm) -> None:
    nodes = fresh.nodes
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


async def test_agents_send_reaches_a_worker_on_another_node_once(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    """`agents__send` (no reply) from a caller to its worker, usually owned by another node:
    the event goes through the worker's partition of the ingress stream and lands once in
    the worker's conversation (the history stream, which every node reads)."""
    keys = [f"fwd-{i}" for i in range(12)]
    nodes = fresh.nodes
    async with asyncio.timeout(60):
        sent = await asyncio.gather(*(
            nodes[i % 3].send(f"fwd {i}", key=key) for i, key in enumerate(keys)
        ))  # fmt: skip
    for reply in sent:
        assert reply.ok, reply.error
        assert '"status":"ok"' in reply.result["input"]  # the caller's tool: accepted
    async with asyncio.timeout(90):
        for i, key in enumerate(keys):
            while True:  # the worker's turn runs after the caller's reply: poll the stream
                texts = user_texts(await read_history(nats_cluster, swarm, "worker", key))
                if texts:
                    break
                await asyncio.sleep(0.2)
            assert texts == [f"fwd {i}"]
        for i, key in enumerate(keys):  # and still once when all have run
            assert user_texts(await read_history(nats_cluster, swarm, "worker", key)) == [
                f"fwd {i}"
            ]
    crossed = [k for k in keys
               if owner_of(nodes, "caller", k) is not owner_of(nodes, "worker", k)]  # fmt: skip
    assert crossed, "no caller and worker on different nodes: the test proved nothing"
