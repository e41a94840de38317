"""Studio on a cluster node (ARCHITECTURE.md §15): the whole swarm, not this machine's files.

A node's files hold only what ran on it. On a cluster node Studio reads what `goondan` reads
there, through the node's control socket:
- the instances from the swarm's history stream (`instance list`);
- a conversation from the same stream (`instance show`: `NodeConversation`), wherever the
  instance runs or ran;
- log lines and runtime events from every live node (`logs`): each node reads its own files,
  the asked node merges them by time. A node answers with its newest PAGE_LINES matching lines
  per ask (node_logs.py), so the trace, graph and chart views see the newest events of each
  node, not its whole history; a node that does not answer is missing from the page.

Runtime events are gathered incrementally under a follower id of this Studio (each node keeps
how far it read for it), into the same bounded `RuntimeIndex` one machine uses.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.cluster.conversation import NodeConversation
from orchestrator.control.client import ClientError, new_request_id
from orchestrator.observe import logview
from orchestrator.observe.conversations import Line, NoSuchInstance
from orchestrator.observe.loglines import LogLine
from orchestrator.studio.link import DaemonLink
from orchestrator.studio.runtime import RuntimeIndex
from protocol.control import InstanceList, LogsQuery, OrchestratorInfo
from protocol.errors import ErrorCode, ErrorInfo
from protocol.jsontypes import JsonObject

if TYPE_CHECKING:
    from orchestrator.control.locate import Coded

ASK_LIMIT = 30.0
"""Seconds for the node to gather every node's answer (its own ask of each is shorter)."""


class ClusterUnavailable(Exception):
    def __init__(self, error: Coded) -> None:
        super().__init__(error.message)
        self.error = error


class ClusterViews:
    def __init__(self, link: DaemonLink, index: RuntimeIndex) -> None:
        self.link = link
        self.index = index
        """The swarm's runtime events (not this machine's files)."""
        self._follower = f"studio-{uuid.uuid4().hex[:12]}"

    async def instances(self) -> list[JsonObject]:
        result = await self._ask(InstanceList(request_id=new_request_id()))
        return list(result["instances"])

    async def conversation(self, node: OrchestratorInfo, key: str, agent: str | None) -> Poller:
        """The conversation's poller, after its first poll (NoSuchInstance when the swarm has
        no such instance, ClusterUnavailable when the node does not answer)."""
        poller = Poller(NodeConversation(node, key, agent))
        await poller.first()
        return poller

    async def lines(self, keep: logview.Filter, follower: str | None = None) -> list[LogLine]:
        """Every node's matching lines, oldest first (with `follower`: those written since
        its last ask)."""
        req = LogsQuery(request_id=new_request_id(), agent=keep.agent, instance=keep.instance,
                        trace=keep.trace, since=keep.since, follower=follower)  # fmt: skip
        result = await self._ask(req)
        return msgspec.convert(result["lines"], list[LogLine])

    async def refresh(self) -> RuntimeIndex:
        """The runtime events every node wrote since the last refresh, added to the index."""
        lines = await self.lines(logview.Filter(), follower=self._follower)
        self.index.add(line.record() for line in lines if line.kind == "events")
        return self.index

    async def _ask(self, req: Any) -> JsonObject:
        reply = await self.link.ask(req, limit=ASK_LIMIT)
        if not reply.ok:
            error = reply.error or ErrorInfo(code=ErrorCode.E_CLUSTER_UNAVAILABLE,
                                             message="the node did not answer")  # fmt: skip
            raise ClusterUnavailable(error)
        result: JsonObject = reply.result
        return result


class Poller:
    """A NodeConversation polled in a worker thread (its control calls block)."""

    def __init__(self, conversation: NodeConversation) -> None:
        self.conversation = conversation
        self.pending: list[Line] = []

    async def first(self) -> None:
        """The first poll: NoSuchInstance passes, a node that does not answer is
        ClusterUnavailable."""
        try:
            self.pending = await asyncio.to_thread(self.conversation.poll)
        except ClientError as exc:
            raise ClusterUnavailable(exc.error) from None

    async def poll(self) -> list[Line]:
        if self.pending:
            lines, self.pending = self.pending, []
            return lines
        try:
            return await asyncio.to_thread(self.conversation.poll)
        except (ClientError, NoSuchInstance):  # the node is away for now: the next poll asks
            return []
