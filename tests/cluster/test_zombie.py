"""A zombie node: stopped (SIGSTOP) for twice the lease TTL while one of its instances runs a
turn, then continued. Its partitions went to the others meanwhile; when it wakes none of its
appends reach the history stream and it drops its activations."""

from __future__ import annotations

import asyncio
import signal

from tests.cluster.harness import FreshSwarm, activate, read_history, turn_running
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon

TTL = 2.0
KEYS = [f"z{i}" for i in range(9)]


async def test_a_paused_node_cannot_append_and_drops_its_instances(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    nodes = fresh.nodes
    async with asyncio.timeout(60):
        owners = await activate(nodes, "worker", KEYS)
    key = next(k for k in KEYS if owners[k] is not nodes[0])
    zombie: Daemon = owners[key]
    other = next(n for n in nodes if n is not zombie)

    mark = zombie.mark()
    sent = await turn_running(zombie, other, "slow turn", key)
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
    async with asyncio.timeout(60):
        await zombie.wait_for("partition_dropped", mark)
        # whichever comes first on waking: the lapse drops its frames unwritten, the lease
        # check refuses them (before a publish, or a publish stopped mid-way), or the
        # stream's sequence check fences them; or the zombie's agent, which lost its
        # orchestrator while it was stopped, ended with nothing more to write (seen under
        # load). In every case the history below must hold the other node's turn only.
        instance = f"agent:worker:{key}"
        process = f"{instance}:1"
        outcomes = {
            asyncio.ensure_future(zombie.wait_for("history_frame_dropped", mark,
                                                  process=process)),
            asyncio.ensure_future(zombie.wait_for("history_not_owner", mark, instance=instance)),
            asyncio.ensure_future(zombie.wait_for("history_fenced", mark, instance=instance)),
            asyncio.ensure_future(zombie.wait_for("history_unwritable", mark, instance=instance)),
            asyncio.ensure_future(zombie.wait_for("transition", mark, process=process,
                                                  target="terminated")),
            asyncio.ensure_future(zombie.wait_for("transition", mark, process=process,
                                                  target="crashed")),
        }  # fmt: skip
        _, pending = await asyncio.wait(outcomes, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
    history = await read_history(nats_cluster, swarm, "worker", key)
    turns = [m.content for m in history if m.content in ("slow turn", "slow done: slow turn")]
    assert turns == ["slow turn", "slow done: slow turn"], [m.content for m in history]
    assert not zombie.find("transition", mark, process=f"agent:worker:{key}:2")
