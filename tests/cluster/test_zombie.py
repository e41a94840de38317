"""A zombie node: stopped (SIGSTOP) for twice the lease TTL while one of its instances runs a
turn, then continued. Its partitions went to the others meanwhile; when it wakes none of its
appends reach the history stream and it drops its activations."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.cluster.harness import (
    StartDaemon,
    owner_of,
    read_history,
    start_nodes,
    swarm_of,
    unique_swarm_bundle,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon

TTL = 2.0
KEYS = [f"z{i}" for i in range(9)]


async def test_a_paused_node_cannot_append_and_drops_its_instances(
    start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    swarm = swarm_of(bundle)
    async with asyncio.timeout(60):
        nodes = await start_nodes(start_daemon, nats_cluster, bundle, tmp_path)
        await asyncio.gather(*(nodes[0].send("hi", "worker", key=k) for k in KEYS))
    owners = {k: owner_of(nodes, "worker", k) for k in KEYS}
    key = next(k for k in KEYS if owners[k] is not nodes[0])
    zombie: Daemon = owners[key]
    other = next(n for n in nodes if n is not zombie)

    mark = zombie.mark()
    sent = asyncio.ensure_future(other.send("slow turn", "worker", key=key))
    async with asyncio.timeout(30):
        await zombie.wait_for("transition", mark, process=f"agent:worker:{key}:1",
                              target="processing")  # fmt: skip
    zombie.signal(signal.SIGSTOP)
    try:
        async with asyncio.timeout(60):
            # another node took the partition, ran the redelivered event and answered
            reply = await sent
            assert reply.ok, reply.error
            assert reply.result["input"] == "slow done: slow turn"
            await asyncio.sleep(2 * TTL)  # the zombie stays stopped at least 2x the TTL
    finally:
        zombie.signal(signal.SIGCONT)
    async with asyncio.timeout(30):
        await zombie.wait_for("partition_dropped", mark)
        # whichever comes first on waking: the lapse drops its frames unwritten, the lease
        # check refuses them (before a publish, or a publish stopped mid-way), or the
        # stream's sequence check fences them
        instance = f"agent:worker:{key}"
        outcomes = {
            asyncio.ensure_future(zombie.wait_for("history_frame_dropped", mark,
                                                  process=f"{instance}:1")),
            asyncio.ensure_future(zombie.wait_for("history_not_owner", mark, instance=instance)),
            asyncio.ensure_future(zombie.wait_for("history_fenced", mark, instance=instance)),
            asyncio.ensure_future(zombie.wait_for("history_unwritable", mark, instance=instance)),
        }  # fmt: skip
        _, pending = await asyncio.wait(outcomes, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
    history = await read_history(nats_cluster, swarm, "worker", key)
    turns = [m.content for m in history if m.content in ("slow turn", "slow done: slow turn")]
    assert turns == ["slow turn", "slow done: slow turn"], [m.content for m in history]
    assert not zombie.find("transition", mark, process=f"agent:worker:{key}:2")
