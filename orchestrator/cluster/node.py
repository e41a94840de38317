"""One cluster node: the daemon's parts that make it part of a swarm spread over machines.

The daemon (`orchestrator/wiring.py`) builds its router and supervisor as on one machine, with
the cluster's ports: the `Ingress` this node's `bind` returns (`accept.ClusterAcceptor`:
accepting = publishing to the ingress stream) and the `Placement` made of it
(`placement.ClusterPlacement`: leased partitions, the history stream). `bind` is the cluster's
one late step: the leases decide where instances run (the supervisor's placement) and a lost
lease stops processes (the supervisor), so the node is opened before the supervisor and handed
it after. Only a daemon started with `--cluster` imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import structlog

from orchestrator.cluster import admin
from orchestrator.cluster.accept import ClusterAcceptor
from orchestrator.cluster.answers import Answers, Handle
from orchestrator.cluster.calls import CallMirror
from orchestrator.cluster.consumers import Consumers
from orchestrator.cluster.history import HistoryWriter
from orchestrator.cluster.ingress import Envelope, NatsJournal
from orchestrator.cluster.leases import LeaseKeeper
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.names import partition_of
from orchestrator.cluster.node_logs import NodeLogs
from orchestrator.cluster.node_requests import NodeRequests
from orchestrator.cluster.options import ClusterOptions
from orchestrator.cluster.swarm_control import SwarmControl
from orchestrator.cluster.swarm_delete import SwarmDelete
from orchestrator.ingress.journal import JournalError
from orchestrator.routing.broker import Hub
from orchestrator.supervision.mailboxes import Mailboxes, RequestBook
from orchestrator.supervision.spawner import SpawnError
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry
from protocol.endpoints import StateLayout
from protocol.events import AgentEvent
from protocol.ids import Address, ProcessKind
from protocol.messages import ShutdownReason

log = structlog.get_logger("goondan.cluster")


@dataclass
class ClusterNode:
    opts: ClusterOptions
    nats: Nats
    journal: NatsJournal
    router: Hub | None = None
    mailboxes: Mailboxes | None = None
    book: RequestBook | None = None
    supervisor: Supervisor | None = None
    consumers: Consumers | None = None
    acceptor: ClusterAcceptor | None = None
    leases: LeaseKeeper | None = None
    history: HistoryWriter | None = None
    call_mirror: CallMirror | None = None
    requests: NodeRequests | None = None
    answers: Answers | None = None
    control: SwarmControl | None = None
    """What a control client asks this node about the whole swarm."""
    leaving: set[int] = field(default_factory=set)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)

    @classmethod
    async def open(cls, opts: ClusterOptions, swarm: str) -> ClusterNode:
        """Connect and prepare the swarm's streams; raises ClusterUnavailable."""
        if not opts.has_credentials:  # only with --insecure-nats (options.py refuses it else)
            log.warning(
                "nats_insecure", node=opts.node, servers=opts.redacted(),
                fix="give the node a NATS user (docs/cluster.md)",
            )  # fmt: skip
        nats_ = await open_swarm(opts, swarm, f"goondan:{swarm}:{opts.node}")
        journal = NatsJournal(nats_, opts.node, opts.policy.partitions)
        return cls(opts, nats_, journal)

    @property
    def node(self) -> str:
        return self.opts.node

    def partition(self, target: Address) -> int:
        return partition_of(target.name, target.instance_key, self.opts.policy.partitions)

    def bind(
        self,
        router: Hub,
        supervisor: Supervisor,
        mailboxes: Mailboxes,
        book: RequestBook,
        layout: StateLayout,
        control: str,
    ) -> ClusterAcceptor:
        """Wire this node to the daemon's router and supervisor; the acceptor to use."""
        self.router, self.supervisor = router, supervisor
        self.mailboxes, self.book = mailboxes, book
        ttl = self.opts.policy.lease_ttl_seconds
        self.consumers = Consumers(self.nats, ttl, self._deliver, self._drop, self._settle)
        self.history = HistoryWriter(self.nats, layout, self.nats.names.swarm, self._writes,
                                     self._fenced)  # fmt: skip
        partitions = self.opts.policy.partitions
        self.requests = NodeRequests(self.nats, self.node)
        own_logs = NodeLogs(layout, self.nats.names.swarm, self.node)
        deleting = SwarmDelete(self.nats, self.requests, supervisor, layout)
        self.control = SwarmControl(self.nats, partitions, self.requests, supervisor, own_logs,
                                    deleting)  # fmt: skip
        # an answer for a moved instance waits out a dead holder's lease and the takeover
        self.answers = Answers(self.requests, partitions, self.admits, 2 * ttl + 2)
        self.call_mirror = CallMirror(self.nats, self.admits, self.history.paths, self.answers)
        self.acceptor = ClusterAcceptor(self.journal, self.consumers, self.history.after)
        self.leases = LeaseKeeper(
            self.nats, self.node, self.opts.policy.partitions, ttl, self.consumers,
            live_count=lambda: len(supervisor.table.live()), control=control,
            asked_to_drain=lambda: admin.drain_requested(self.nats, self.node),
        )  # fmt: skip
        return self.acceptor

    # -- what the cluster's Placement asks (placement.py) -----------------------------------

    def admits(self, target: Address) -> bool:
        """Whether an instance may run here: agents only in partitions this node leases."""
        if target.kind is not ProcessKind.AGENT:
            return True
        p = self.partition(target)
        return self.leases is not None and self.leases.holds(p) and p not in self.leaving

    def _writes(self, target: Address) -> bool:
        """Whether this node may append to the instance's history (it holds the lease)."""
        return self.leases is not None and self.leases.holds(self.partition(target))

    async def prepare(self, target: Address) -> None:
        """The supervisor's hook before a process starts: its files from the history."""
        if self.history is not None and target.kind is ProcessKind.AGENT:
            assert self.supervisor is not None
            entry = self.supervisor.table.entry(target)
            await self.history.prepare(target, entry.generation)
            if self.call_mirror is not None:  # calls it left suspended on a node that died
                try:
                    await self.call_mirror.restore(target, self.history.paths(target))
                except (nats.errors.Error, TimeoutError, OSError) as exc:
                    raise SpawnError(f"pending calls of {target} unreadable: "
                                     f"{type(exc).__name__}") from exc  # fmt: skip

    def history_frame(self, entry: ProcessEntry, line: bytes) -> None:
        assert self.history is not None
        self.history.append(entry, line)

    def forward_response(
        self, requester: Address, response: AgentEvent, server: Address | None = None
    ) -> None:
        """A response for an agent: through its partition's ingress subject, durable, to
        whichever node owns it (this one included), after the serving instance's appends."""

        async def forward() -> None:
            try:
                await self.journal.append(response, str(requester))
            except JournalError as exc:
                log.error("response_not_forwarded", to=str(requester), error=exc.message)

        if server is not None and self.history is not None:
            self.history.after(server, forward)
        else:
            self._background(forward())

    def _fenced(self, target: Address) -> None:
        """An append was refused (another node wrote, or our lease lapsed): stop the process
        here and give its events back to the stream (refused, so whoever owns the partition
        runs them again from the history's end; this node too, on a fresh activation)."""
        assert self.supervisor is not None
        assert self.consumers is not None
        entry = self.supervisor.table.get(target)
        if entry is not None:
            self._forget_work(entry)
            if entry.live:
                self.supervisor.evict(entry)
        self.consumers.hand_back(target)

    # -- the consumers' callbacks --------------------------------------------------------

    def _deliver(self, envelope: Envelope, target: Address) -> None:
        assert self.router is not None
        assert self.consumers is not None
        event = envelope.event
        if event.in_reply_to is not None:
            self.router.deliver_response(target, event)
            self.consumers.complete(event.id)  # a response runs no turn
            return
        assert self.supervisor is not None
        problem = self.supervisor.check_target(target)
        if problem is not None and event.reply_to is None:
            log.warning("event_dropped", event_id=event.id, code=problem.code,
                        reason=problem.message)  # fmt: skip
            self.consumers.complete(event.id)
            return
        self.router.submit(event, target)

    def _instances(self, partition: int) -> list[ProcessEntry]:
        assert self.supervisor is not None
        return [
            e for e in self.supervisor.table
            if e.address.kind is ProcessKind.AGENT and self.partition(e.address) == partition
        ]  # fmt: skip

    def _forget_work(self, entry: ProcessEntry) -> None:
        """The instance's queued events and the requests it serves are the next owner's."""
        assert self.book is not None
        assert self.mailboxes is not None
        for request in self.book.served_by(entry.address):
            self.book.close(request.correlation_id)
        self.mailboxes.pop(entry.address, None)

    def _drop(self, partition: int) -> None:
        """The lease lapsed: stop the partition's instances now (SIGKILL), forget their work."""
        assert self.supervisor is not None
        dropped = 0
        for entry in self._instances(partition):
            self._forget_work(entry)
            if self.history is not None:
                self.history.forget(entry.address)
            if entry.live:
                self.supervisor.evict(entry)
                dropped += 1
        log.warning("partition_dropped", partition=partition, instances=dropped)

    async def _settle(self, partition: int) -> None:
        """Give the partition away: let running turns finish (drain), then forget the rest."""
        assert self.supervisor is not None
        self.leaving.add(partition)
        try:
            entries = self._instances(partition)
            stops = [self.supervisor.stop(e, ShutdownReason.RESTART) for e in entries if e.live]
            await asyncio.gather(*stops)
            if self.history is not None:  # the turns that ran are in the stream before we go
                await asyncio.gather(*(self.history.flush(e.address) for e in entries))
            for entry in entries:
                self._forget_work(entry)
        finally:
            self.leaving.discard(partition)

    # -- running -----------------------------------------------------------------------------

    async def run(self, answer: Handle) -> None:
        """Serve the swarm as this node; `answer` takes the answers other nodes forward to
        the calls this node runs (the deferred-call index's `handle`)."""
        assert self.leases is not None
        assert self.consumers is not None
        await admin.clear_drain(self.nats, self.node)  # a (re)start ends an earlier drain
        if self.answers is not None:
            await self.answers.serve(answer)
        if self.control is not None:
            await self.control.serve()
        log.info("cluster_joined", node=self.node, servers=self.opts.redacted(),
                 partitions=self.opts.policy.partitions)  # fmt: skip
        async with asyncio.TaskGroup() as group:
            group.create_task(self.leases.run())
            group.create_task(self.consumers.keep_alive())
            if self.call_mirror is not None:
                group.create_task(self.call_mirror.sweep_forever(time.time))

    async def leave(self) -> None:
        """A graceful stop: give every partition away (the others take them at once)."""
        if self.leases is None:
            return
        started = time.monotonic()
        await self.leases.release_all()
        log.info("cluster_left", node=self.node, seconds=round(time.monotonic() - started, 3))

    async def close(self) -> None:
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.consumers is not None:
            await self.consumers.close()
        if self.requests is not None:
            await self.requests.close()
        if self.call_mirror is not None:
            await self.call_mirror.close()
        await self.nats.close()

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
