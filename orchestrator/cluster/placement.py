"""The cluster's `Placement` (orchestrator/supervision/ports.py): an agent instance runs on the
node that leases its partition; its files come from the history stream before its process
starts; a response for an agent goes through the ingress stream to whichever node owns it; a
child's conversation lines go to the history stream (ARCHITECTURE.md §15)."""

from __future__ import annotations

from orchestrator.cluster.node import ClusterNode
from orchestrator.supervision.table import ProcessEntry
from protocol.events import AgentEvent
from protocol.ids import Address


class ClusterPlacement:
    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    def admits(self, target: Address) -> bool:
        return self._node.admits(target)

    async def prepare(self, target: Address) -> None:
        await self._node.prepare(target)

    def route_response(
        self, requester: Address, response: AgentEvent, server: Address | None
    ) -> None:
        self._node.forward_response(requester, response, server)

    def history(self, entry: ProcessEntry, line: bytes) -> bool:
        self._node.history_frame(entry, line)
        return True
