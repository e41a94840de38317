"""The cluster's `Placement` (orchestrator/supervision/ports.py): an agent instance runs on the
node that leases its partition; its files come from the history stream before its process
starts; a response for an agent goes through the ingress stream to whichever node owns it; a
child's conversation lines go to the history stream (ARCHITECTURE.md §15).

It is built before the supervisor (which is built with it) and before the node's lease keeper:
what it reads of the leases is their `Tenancy`, which the keeper (orchestrator/cluster/node.py)
writes. An append the stream refuses fences the instance: its address goes to `fences`, which
the node serves (it stops the process, built after the supervisor).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import nats.errors
import structlog

from orchestrator.cluster.answers import Answers
from orchestrator.cluster.calls import CallMirror
from orchestrator.cluster.history import HistoryWriter
from orchestrator.cluster.leases import Tenancy
from orchestrator.cluster.node_requests import NodeRequests
from orchestrator.cluster.nodelink import NodeLink
from orchestrator.ingress.journal import JournalError
from orchestrator.supervision.spawner import SpawnError
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.endpoints import StateLayout
from protocol.events import AgentEvent
from protocol.ids import Address, ProcessKind

log = structlog.get_logger("goondan.cluster")


class ClusterPlacement:
    def __init__(self, link: NodeLink, table: ProcessTable, layout: StateLayout) -> None:
        self.link = link
        self.table = table
        self.tenancy = Tenancy(link.ttl)
        self.fences: asyncio.Queue[Address] = asyncio.Queue()
        """Instances whose history append was refused (another node wrote, or the lease
        lapsed), for the node to stop here."""
        self.histories = HistoryWriter(link.nats, layout, link.nats.names.swarm, self._writes,
                                       self.fences.put_nowait)  # fmt: skip
        self.requests = NodeRequests(link.nats, link.node)
        # an answer for a moved instance waits out a dead holder's lease and the takeover
        self.answers = Answers(self.requests, link.opts.policy.partitions, self.admits,
                               2 * link.ttl + 2)  # fmt: skip
        self.call_mirror = CallMirror(link.nats, self.admits, self.histories.paths, self.answers)
        self._tasks: set[asyncio.Future[None]] = set()

    def admits(self, target: Address) -> bool:
        """Whether an instance may run here: agents only in partitions this node leases."""
        if target.kind is not ProcessKind.AGENT:
            return True
        return self.tenancy.admits(self.link.partition(target))

    def _writes(self, target: Address) -> bool:
        """Whether this node may append to the instance's history (it holds the lease)."""
        return self.tenancy.holds(self.link.partition(target))

    async def prepare(self, target: Address) -> None:
        """The supervisor's hook before a process starts: its files from the history."""
        if target.kind is not ProcessKind.AGENT:
            return
        await self.histories.prepare(target, self.table.entry(target).generation)
        try:  # calls it left suspended on a node that died
            await self.call_mirror.restore(target, self.histories.paths(target))
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            raise SpawnError(f"pending calls of {target} unreadable: "
                             f"{type(exc).__name__}") from exc  # fmt: skip

    def route_response(
        self, requester: Address, response: AgentEvent, server: Address | None
    ) -> None:
        """A response for an agent: through its partition's ingress subject, durable, to
        whichever node owns it (this one included), after the serving instance's appends."""

        async def forward() -> None:
            try:
                await self.link.journal.append(response, str(requester))
            except JournalError as exc:
                log.error("response_not_forwarded", to=str(requester), error=exc.message)

        if server is not None:
            self.histories.after(server, forward)
        else:
            self._background(forward())

    def history(self, entry: ProcessEntry, line: bytes) -> bool:
        self.histories.append(entry, line)
        return True

    async def finish(self) -> None:
        """Let the responses being forwarded reach the stream (a graceful stop)."""
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        await self.requests.close()
        await self.call_mirror.close()

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
