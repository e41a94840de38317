"""A waiting send gets its reply however the cluster's faults shuffle its way back.

- The published reply was lost: core NATS drops a message whose server dies on its way, and the
  client then waited its whole timeout for a turn that had finished (docs/cluster.md "Faults":
  after `nats_kill`, a send waited 30 s). It is read from the `replies` bucket.
- The publish of the event was retried after a cut and came back a duplicate of its own first
  try: the send keeps waiting for its event rather than attaching to it anew.
- Two waits for one event (a send and an attach): one ending leaves the other waiting. Before,
  the first wait's end unsubscribed the second (both were filed under the event id), and a
  send through a node cut from NATS waited 30 s for a reply that had been published
  (`make cluster-faults`, node_cut).

On a real NATS cluster."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import msgspec
from structlog.testing import capture_logs

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.accept import RECHECK_FIRST, ClusterAcceptor
from orchestrator.cluster.consumers import Consumers
from orchestrator.cluster.ingress import NatsJournal
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.options import options
from protocol.events import AgentEvent, Source, SourceKind, new_event
from protocol.ids import parse_address
from tests.cluster.natsd import NatsCluster

PARTITIONS = 4
TTL = 2.0
SOURCE = Source(kind=SourceKind.CLI, name="test")
CALLER = parse_address("agent:caller:k")


async def nothing(partition: int) -> None:
    return None


@dataclass
class Node:
    conn: Nats
    journal: NatsJournal
    acceptor: ClusterAcceptor

    async def publish_reply(self, event_id: str, reply: AgentEvent) -> None:
        """As the owner publishes it (never kept)."""
        subject = self.conn.names.reply_subject(event_id)
        await self.conn.nc.publish(subject, msgspec.msgpack.encode(reply))


@asynccontextmanager
async def node(nats_cluster: NatsCluster) -> AsyncIterator[Node]:
    swarm = f"rr{uuid.uuid4().hex[:8]}"
    policy = ClusterPolicy(partitions=PARTITIONS, lease_ttl_seconds=TTL, replicas=3)
    conn = await open_swarm(options(nats_cluster.urls, "a", None, policy), swarm, "a")
    journal = NatsJournal(conn, "a", PARTITIONS)
    consumers = Consumers(conn, TTL, lambda e, t: None, lambda p: None, nothing)
    acceptor = ClusterAcceptor(journal, consumers, lambda target, step: None)
    try:
        yield Node(conn, journal, acceptor)
    finally:
        await acceptor.close()
        await conn.close()


def waiter() -> asyncio.Future[AgentEvent]:
    return asyncio.get_running_loop().create_future()


def made(type_: str, text: str) -> AgentEvent:
    return new_event(type=type_, input=text, instance_key="k", source=SOURCE)


async def sent(a: Node) -> tuple[AgentEvent, asyncio.Future[AgentEvent]]:
    """An input accepted with a wait for its reply, as a `goondan send` makes it."""
    event = made("input", "hi")
    waiting = waiter()
    await a.acceptor.accept(event, CALLER, waiter=waiting)
    return event, waiting


async def test_a_send_whose_published_reply_was_lost_reads_it_from_the_bucket(
    nats_cluster: NatsCluster,
) -> None:
    async with asyncio.timeout(30), node(nats_cluster) as a:
        with capture_logs() as logs:
            event, waiting = await sent(a)
            reply = made("reply", "done")
            await a.journal.complete(event.id, reply)  # kept; its publish never arrives
            async with asyncio.timeout(RECHECK_FIRST + 5):  # before the fix: forever
                got = await waiting
        assert got.id == reply.id and got.input == "done"
        assert [line["event_id"] for line in logs if line["event"] == "reply_recovered"] == [
            event.id
        ]


async def test_a_publish_retried_after_its_first_try_was_stored_keeps_waiting(
    nats_cluster: NatsCluster,
) -> None:
    async with asyncio.timeout(30), node(nats_cluster) as a:
        event, first_try = await sent(a)
        first_try.cancel()  # its ack was lost: the send tries again with the same message id
        retry = waiter()
        appended = await a.acceptor.accept(event, CALLER, waiter=retry)
        assert appended is not None and not appended.duplicate
        assert appended.entry.event.id == event.id
        reply = made("reply", "done")
        await a.publish_reply(event.id, reply)
        async with asyncio.timeout(5):
            got = await retry
        assert got.id == reply.id


async def test_one_wait_ending_leaves_another_wait_for_the_same_event_waiting(
    nats_cluster: NatsCluster,
) -> None:
    async with asyncio.timeout(30), node(nats_cluster) as a:
        event, sending = await sent(a)
        found = await a.acceptor.attach(event.id)
        assert found is not None
        _, attached = found
        assert attached is not None
        other = made("reply", "other")
        sending.set_result(other)  # the send's wait ends first ...
        await asyncio.sleep(0)  # ... and its done callbacks run
        reply = made("reply", "done")
        await a.publish_reply(event.id, reply)
        async with asyncio.timeout(5):  # before the fix: the attach's wait was ended with it
            got = await attached
        assert got is not None and got.id == reply.id
