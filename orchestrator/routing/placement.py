"""One machine's `Placement` (orchestrator/supervision/ports.py): every instance runs here.

The cluster's is `orchestrator/cluster/node.py`; the daemon picks one at start.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.supervision.table import ProcessEntry
from protocol.events import AgentEvent
from protocol.ids import Address


class LocalPlacement:
    def __init__(self, deliver: Callable[[Address, AgentEvent], None]) -> None:
        self._deliver = deliver
        """The router's `deliver_response`: to the requester's process, or queued while it
        starts."""

    def admits(self, target: Address) -> bool:
        return True

    async def prepare(self, target: Address) -> None:
        return None  # its files are here already

    def route_response(
        self, requester: Address, response: AgentEvent, server: Address | None
    ) -> None:
        self._deliver(requester, response)

    def history(self, entry: ProcessEntry, line: bytes) -> bool:
        return False  # children of one machine send no history frames
