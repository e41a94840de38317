"""A waiting send gets its reply from the `replies` bucket when the one published to it was
lost: core NATS drops a message whose server dies on its way, and the client then waited its
whole timeout for a turn that had finished (docs/cluster.md "Faults": after `nats_kill`, a
send waited 30 s). On a real NATS cluster: the reply is kept as the owner keeps it, never
published."""

from __future__ import annotations

import asyncio
import uuid

from structlog.testing import capture_logs

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.accept import RECHECK_FIRST, ClusterAcceptor
from orchestrator.cluster.consumers import Consumers
from orchestrator.cluster.ingress import NatsJournal
from orchestrator.cluster.link import open_swarm
from orchestrator.cluster.options import options
from protocol.events import AgentEvent, Source, SourceKind, new_event
from protocol.ids import parse_address
from tests.cluster.natsd import NatsCluster

PARTITIONS = 4
TTL = 2.0


async def nothing(partition: int) -> None:
    return None


async def test_a_send_whose_published_reply_was_lost_reads_it_from_the_bucket(
    nats_cluster: NatsCluster,
) -> None:
    swarm = f"rr{uuid.uuid4().hex[:8]}"
    policy = ClusterPolicy(partitions=PARTITIONS, lease_ttl_seconds=TTL, replicas=3)
    async with asyncio.timeout(30):
        conn = await open_swarm(options(nats_cluster.urls, "a", None, policy), swarm, "a")
        journal = NatsJournal(conn, "a", PARTITIONS)
        consumers = Consumers(conn, TTL, lambda e, t: None, lambda p: None, nothing)
        acceptor = ClusterAcceptor(journal, consumers, lambda target, step: None)
        try:
            source = Source(kind=SourceKind.CLI, name="test")
            event = new_event(type="input", input="hi", instance_key="k", source=source)
            waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
            with capture_logs() as logs:
                await acceptor.accept(event, parse_address("agent:caller:k"), waiter=waiter)
                reply = new_event(type="reply", input="done", instance_key="k", source=source)
                await journal.complete(event.id, reply)  # kept; its publish never arrives
                async with asyncio.timeout(RECHECK_FIRST + 5):  # before the fix: forever
                    got = await waiter
            assert got.id == reply.id and got.input == "done"
            assert [line["event_id"] for line in logs if line["event"] == "reply_recovered"] == [
                event.id
            ]
        finally:
            await acceptor.close()
            await conn.close()
