"""Proof 6: a turn suspended on a deferred (client-side) call whose node is SIGKILLed. The
call was kept in the swarm's `calls` bucket before it was announced. The survivor that takes
the partition runs the instance from then on; the call is listed and answered, with its id
unchanged, through the other survivor, which hands the answer to the new owner; that node
writes the call back before the instance starts there, the instance resumes the suspended
turn, and the turn ends once.

The event that started the turn is acknowledged when the client is told of the call (the
notice is the event's first reply), so the dead node's event is not delivered again: nothing
starts the instance on the new owner until the answer does. The test kills the node only once
that acknowledgement is in, the case that a fast kill used to hide."""

from __future__ import annotations

import asyncio
import json

import nats as natsio

from orchestrator.cluster.names import SwarmNames, partition_of
from tests.cluster.harness import (
    FreshSwarm,
    on_node,
    owner_of,
    read_history,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import run_cli

KEY = "d1"
PARTITIONS = 12
"""The test bundle's Swarm.spec.policy.cluster.partitions."""


async def acknowledged(cluster: NatsCluster, swarm: str) -> None:
    """Until the instance's partition consumer has acknowledged everything it delivered. The
    server has nothing to await on, so its state is asked every 50 ms (bounded by the caller)."""
    names = SwarmNames(swarm)
    consumer = names.consumer(partition_of("worker", KEY, PARTITIONS))
    nc = await natsio.connect(cluster.urls.split(","))
    try:
        js = nc.jetstream()
        while True:
            info = await js.consumer_info(names.ingress_stream, consumer)
            if info.num_ack_pending == 0 and info.delivered.stream_seq == info.ack_floor.stream_seq:
                return
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def test_a_deferred_call_outlives_its_node(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        first = await nodes[0].send("hi", "worker", key=KEY)
        assert first.ok, first.error
    victim = owner_of(nodes, "worker", KEY)
    survivors = [n for n in nodes if n is not victim]
    marks = [n.mark() for n in survivors]
    async with asyncio.timeout(30):
        accepted = await survivors[0].send("ask colour", "worker", key=KEY, wait=False)
        assert accepted.ok, accepted.error
        made = await victim.wait_for("deferred_call_pending", agent="worker", instanceKey=KEY)
        await acknowledged(nats_cluster, swarm)  # so nothing is delivered again: the hard case
    victim.proc.kill()

    p = partition_of("worker", KEY, PARTITIONS)
    async with asyncio.timeout(60):
        gains = {asyncio.ensure_future(n.wait_for("partition_gained", m, partition=p))
                 for n, m in zip(survivors, marks, strict=True)}  # fmt: skip
        _, waiting = await asyncio.wait(gains, return_when=asyncio.FIRST_COMPLETED)
        for task in waiting:
            task.cancel()
        owner, owner_mark = next((n, m) for n, m in zip(survivors, marks, strict=True)
                                 if n.find("partition_gained", m, partition=p))  # fmt: skip
        asker = next(n for n in survivors if n is not owner)
        # the same call id, listed and answered through the survivor that does not run it
        code, out, err = await run_cli(*on_node(asker, "calls", "list", "--json"))
        assert code == 0, err
        assert made["call_id"] in out
        code, _, err = await run_cli(
            *on_node(asker, "calls", "resolve", made["call_id"], "--result", json.dumps("blue"))
        )
        assert code == 0, err
        # the new owner wrote the call back before the instance started there
        await owner.wait_for("deferred_calls_restored", owner_mark)
        while True:
            history = await read_history(nats_cluster, swarm, "worker", KEY)
            said = [m.content for m in history if m.role.value == "assistant"]
            answers = [text for text in said if text.startswith("asked:")]
            if answers:
                break
            await asyncio.sleep(0.2)
    assert [m.content for m in history if m.role.value == "user"] == ["hi", "ask colour"]
    assert len(answers) == 1 and "blue" in answers[0], answers  # the turn ended once
