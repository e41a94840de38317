"""One cluster node: the daemon's parts that make it part of a swarm spread over machines.

The composition root (`orchestrator/wiring.py`) builds the router and supervisor as on one
machine, with the cluster's ports: the `Placement` (`placement.ClusterPlacement`: leased
partitions, the history stream), built first, and the `Ingress` of this node
(`accept.ClusterAcceptor`: accepting = publishing to the ingress stream). The node is built
after the supervisor, in one pass: its lease keeper decides what it holds (the placement reads
that `Tenancy`), its consumers hand events to the router (through the relay) and a lost or
given-away partition stops processes (the supervisor). Only a daemon started with `--cluster`
imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import nats.errors
import structlog

from orchestrator.cluster import admin
from orchestrator.cluster.accept import ClusterAcceptor
from orchestrator.cluster.answers import Handle
from orchestrator.cluster.consumers import Consumers
from orchestrator.cluster.ingress import Envelope
from orchestrator.cluster.leases import LeaseKeeper
from orchestrator.cluster.node_logs import NodeLogs
from orchestrator.cluster.placement import ClusterPlacement
from orchestrator.cluster.stuck_bucket import StuckBucket
from orchestrator.cluster.swarm_control import SwarmControl
from orchestrator.cluster.swarm_delete import SwarmDelete
from orchestrator.routing.broker import Hub
from orchestrator.supervision.mailboxes import Mailboxes, RequestBook
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry
from protocol.endpoints import StateLayout
from protocol.ids import Address, ProcessKind
from protocol.messages import ShutdownReason

LEAVE_LIMIT = 5.0
"""How long a stopping node hands its partitions over; what is left lapses after the lease TTL
(the others take it then), so a NATS that does not answer never holds a stop past its grace."""
CLOSE_LIMIT = 5.0

log = structlog.get_logger("goondan.cluster")


class ClusterNode:
    def __init__(
        self,
        placement: ClusterPlacement,
        supervisor: Supervisor,
        router: Hub,
        mailboxes: Mailboxes,
        book: RequestBook,
        layout: StateLayout,
        control: str,
    ) -> None:
        """`router` is the relay to the router (built after this node); `control`, this
        node's control socket, announced in its node record."""
        link = placement.link
        self.placement, self.link = placement, link
        self.router, self.supervisor = router, supervisor
        self.mailboxes, self.book = mailboxes, book
        self.consumers = Consumers(link.nats, link.ttl, self._deliver, self._drop, self._settle)
        partitions = link.opts.policy.partitions
        own_logs = NodeLogs(layout, link.nats.names.swarm, link.node)
        deleting = SwarmDelete(link.nats, placement.requests, supervisor, layout)
        self.control = SwarmControl(link.nats, partitions, placement.requests, supervisor,
                                    own_logs, deleting)  # fmt: skip
        """What a control client asks this node about the whole swarm."""
        self.acceptor = ClusterAcceptor(link.journal, self.consumers, placement.histories.after)
        tenancy = placement.tenancy
        replicas = link.opts.policy.replicas
        self.leases = LeaseKeeper(
            link.nats, link.node, partitions, link.ttl, self.consumers,
            live_count=lambda: len(supervisor.table.live()), control=control,
            asked_to_drain=lambda: admin.drain_requested(link.nats, link.node),
            clock=tenancy.clock, held=tenancy.held,
            nodes_stuck=StuckBucket(link.nats, "nodes", link.ttl, replicas, tenancy.clock),
            leases_stuck=StuckBucket(link.nats, "leases", link.ttl, replicas, tenancy.clock),
        )  # fmt: skip

    @property
    def node(self) -> str:
        return self.link.node

    def _fenced(self, entry: ProcessEntry) -> None:
        """An append was refused (another node wrote, or our lease lapsed): stop the process
        here and give its events back to the stream (refused, so whoever owns the partition
        runs them again from the history's end; this node too, on a fresh activation)."""
        self._forget_work(entry)
        if entry.live:
            self.supervisor.evict(entry)
        self.consumers.hand_back(entry.address)

    async def _serve_fences(self) -> None:
        while True:
            address = await self.placement.fences.get()
            entry = self.supervisor.table.get(address)
            if entry is not None:
                self._fenced(entry)
            else:
                self.consumers.hand_back(address)

    # -- the consumers' callbacks --------------------------------------------------------

    def _deliver(self, envelope: Envelope, target: Address) -> None:
        event = envelope.event
        if event.in_reply_to is not None:
            self.router.deliver_response(target, event)
            self.consumers.complete(event.id)  # a response runs no turn
            return
        problem = self.supervisor.check_target(target)
        if problem is not None and event.reply_to is None:
            log.warning("event_dropped", event_id=event.id, code=problem.code,
                        reason=problem.message)  # fmt: skip
            self.consumers.complete(event.id)
            return
        self.router.submit(event, target)

    def _instances(self, partition: int) -> list[ProcessEntry]:
        return [
            e for e in self.supervisor.table
            if e.address.kind is ProcessKind.AGENT and self.link.partition(e.address) == partition
        ]  # fmt: skip

    def _forget_work(self, entry: ProcessEntry) -> None:
        """The instance's queued events and the requests it serves are the next owner's."""
        for request in self.book.served_by(entry.address):
            self.book.close(request.correlation_id)
        self.mailboxes.pop(entry.address, None)

    def _drop(self, partition: int) -> None:
        """The lease lapsed: stop the partition's instances now (SIGKILL), forget their work."""
        dropped = 0
        for entry in self._instances(partition):
            self._forget_work(entry)
            self.placement.histories.forget(entry.address)
            if entry.live:
                self.supervisor.evict(entry)
                dropped += 1
        log.warning("partition_dropped", partition=partition, instances=dropped)

    async def _settle(self, partition: int) -> None:
        """Give the partition away: let running turns finish (drain), then forget the rest."""
        leaving = self.placement.tenancy.leaving
        leaving.add(partition)
        try:
            entries = self._instances(partition)
            stops = [self.supervisor.stop(e, ShutdownReason.RESTART, hand_over=True)
                     for e in entries if e.live]  # fmt: skip
            await asyncio.gather(*stops)
            # the turns that ran are in the stream before we go
            histories = self.placement.histories
            await asyncio.gather(*(histories.flush(e.address) for e in entries))
            for entry in entries:
                self._forget_work(entry)
        finally:
            leaving.discard(partition)

    # -- running -----------------------------------------------------------------------------

    async def run(self, answer: Handle) -> None:
        """Serve the swarm as this node; `answer` takes the answers other nodes forward to
        the calls this node runs (the deferred-call index's `handle`)."""
        link = self.link
        await admin.clear_drain(link.nats, link.node)  # a (re)start ends an earlier drain
        await self.placement.answers.serve(answer)
        await self.control.serve()
        log.info("cluster_joined", node=link.node, servers=link.opts.redacted(),
                 partitions=link.opts.policy.partitions)  # fmt: skip
        async with asyncio.TaskGroup() as group:
            group.create_task(self.leases.run())
            group.create_task(self.consumers.keep_alive())
            group.create_task(self.placement.call_mirror.sweep_forever(time.time))
            group.create_task(self._serve_fences())

    async def leave(self) -> None:
        """A graceful stop: give every partition away (the others take them at once)."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(LEAVE_LIMIT):
                await self.leases.release_all()
        except TimeoutError:
            log.warning("cluster_leave_slow", node=self.node, seconds=LEAVE_LIMIT,
                        left=sorted(self.leases.held))  # fmt: skip
        log.info("cluster_left", node=self.node, seconds=round(time.monotonic() - started, 3))

    async def close(self) -> None:
        try:
            async with asyncio.timeout(CLOSE_LIMIT):
                await self.placement.finish()
                await self.consumers.close()
                await self.placement.close()
                await self.link.nats.close()
        except TimeoutError:
            log.warning("cluster_close_slow", node=self.node, seconds=CLOSE_LIMIT)
        finally:
            with contextlib.suppress(nats.errors.Error, OSError):
                await self.link.nats.nc.close()
