"""Start, join and leave on a current NATS: nodes started at the same moment on a fresh swarm
all come up (creation races and "no responders" while a bucket's leader is elected are waited
out), and a node's graceful stop ends within its grace period whatever NATS answers, even
right after a peer was SIGKILLed (its lease releases may meet keys that moved).

`CLUSTER_START_ROUNDS` (default 20) rounds of three nodes started together, each round on a
swarm of its own (sharing the module's NATS cluster: a fresh one per round would triple the
time and start no differently for goondan, whose streams and buckets are per swarm)."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from pathlib import Path

from tests.cluster.harness import StartDaemon, start_nodes, unique_swarm_bundle
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon

ROUNDS = int(os.environ.get("CLUSTER_START_ROUNDS", "20"))
GRACE = 30.0
"""The bundle's grace period (Swarm.spec.policy.gracePeriodSeconds, its default)."""


def troubles(node: Daemon) -> list[object]:
    """What a healthy start and stop never prints: errors, tracebacks, lost task exceptions."""
    found: list[object] = []
    for line in node.lines:
        text = str(line.get("text", ""))
        if (
            line.get("log_level") in ("error", "critical")
            or "Traceback" in text
            or ("never retrieved" in text)
        ):
            found.append(line)
    return found


async def stop_all(nodes: list[Daemon]) -> list[int]:
    for node in nodes:
        node.signal(signal.SIGTERM)
    async with asyncio.timeout(GRACE):
        return list(await asyncio.gather(*(node.wait() for node in nodes)))


async def test_nodes_started_together_come_up_and_stop_within_their_grace(
    start_daemon: StartDaemon, nats_cluster: NatsCluster
) -> None:
    for round_ in range(ROUNDS):
        # a short root: a node's control socket path must fit the 107 bytes of a unix socket
        with tempfile.TemporaryDirectory(prefix="gss") as tmp:
            root = Path(tmp)
            bundle = unique_swarm_bundle(root)
            async with asyncio.timeout(60):
                # coverage is measured in the first round; the others repeat its paths for
                # their races, without the tracer's CPU (~a third more per node)
                nodes = await start_nodes(
                    start_daemon, nats_cluster, bundle, root, measured=round_ == 0
                )
            assert await stop_all(nodes) == [0, 0, 0], round_
        for node in nodes:
            assert node.find("cluster_left"), round_
            assert not troubles(node), (round_, troubles(node))


async def test_a_peer_s_death_does_not_hold_the_others_stop(
    start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    async with asyncio.timeout(60):
        nodes = await start_nodes(start_daemon, nats_cluster, bundle, tmp_path)
        for i, node in enumerate(nodes):  # an instance on every node, so each has work
            assert (await node.send(f"hi {i}", key=f"k{i}")).ok
    victim, survivors = nodes[0], nodes[1:]
    victim.signal(signal.SIGKILL)
    async with asyncio.timeout(10):
        await victim.wait()
    assert await stop_all(survivors) == [0, 0]
    for node in survivors:
        assert node.find("cluster_left")
        assert not troubles(node), troubles(node)
