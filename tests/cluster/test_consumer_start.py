"""A partition's consumer starts as soon as JetStream has elected its new leader: a node that
gains a partition while the consumer's leader server is gone (killed, cut, paused) asks again
every half lease TTL instead of waiting the JetStream API's 5 s timeout and giving its new
lease up (docs/cluster.md "Faults": after `nats_kill`, a partition gained then was dropped
and taken again 7.6 s later). Its own module: it pauses a server of the module's cluster."""

from __future__ import annotations

import asyncio
import signal
import uuid

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.consumers import Consumers
from orchestrator.cluster.ingress import Envelope
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.options import options
from protocol.ids import Address
from tests.cluster.natsd import NatsCluster

TTL = 2.0
PARTITION = 0


async def nothing(partition: int) -> None:
    return None


def consumers(conn: Nats, delivered: list[str]) -> Consumers:
    def deliver(envelope: Envelope, target: Address) -> None:
        delivered.append(envelope.event.id)

    return Consumers(conn, TTL, deliver, drop=lambda p: None, settle=nothing)


async def connect(urls: str, swarm: str, name: str) -> Nats:
    policy = ClusterPolicy(partitions=4, lease_ttl_seconds=TTL, replicas=3)
    return await open_swarm(options(urls, name, None, policy), swarm, name)


async def test_a_consumer_whose_leader_is_gone_starts_once_another_is_elected(
    nats_cluster: NatsCluster,
) -> None:
    swarm = f"cs{uuid.uuid4().hex[:8]}"
    async with asyncio.timeout(40):
        first = await connect(nats_cluster.urls, swarm, "a")
        made = consumers(first, [])
        await made.gained(PARTITION)  # the durable consumer exists, as after any earlier owner
        await made.close()
        names = first.names
        info = await first.js.consumer_info(names.ingress_stream, names.consumer(PARTITION))
        await first.close()
        assert info.cluster is not None and info.cluster.leader is not None
        leader = next(s for s in nats_cluster.servers if s.name == info.cluster.leader)
        others = ",".join(s.url for s in nats_cluster.servers if s is not leader)
        second = await connect(others, swarm, "b")
        assert leader.proc is not None
        leader.proc.send_signal(signal.SIGSTOP)  # its requests are neither answered nor refused
        taker = consumers(second, [])
        try:
            await taker.gained(PARTITION)  # before the fix: TimeoutError after 5 s
            # started: asked again until a leader answered (`consumer_start_retried`), or at
            # once when JetStream had already moved the consumer's leader (2 runs in 9 here)
            assert PARTITION in taker.owned
        finally:
            leader.proc.send_signal(signal.SIGCONT)
            await taker.close()  # its pull loop, whatever failed: nothing left to the loop's close
            await second.close()


async def test_a_pull_loop_ends_when_stopped_after_its_connection_closed(
    nats_cluster: NatsCluster,
) -> None:
    """nats-py turns the cancellation of a fetch on a closed connection into its own
    ConnectionClosedError: the loop, which retries on NATS errors, must still end (before the
    fix it went on every 0.2 s, and whoever awaited its stop, e.g. an event loop's close,
    waited forever)."""
    swarm = f"cs{uuid.uuid4().hex[:8]}"
    async with asyncio.timeout(30):
        conn = await connect(nats_cluster.urls, swarm, "a")
        pulling = consumers(conn, [])
        await pulling.gained(PARTITION)
        await asyncio.sleep(0.3)  # the loop is in its long-polled fetch
        await conn.close()
        async with asyncio.timeout(10):
            await pulling.close()
        assert PARTITION not in pulling.owned or not pulling._loops
