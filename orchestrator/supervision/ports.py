"""What the supervisor asks of the rest of the daemon, as Protocols it is built with
(ARCHITECTURE.md §5).

`Deliveries` is the routing side (the router implements it): the frames the supervisor sends
and what becomes of a process's events when it dies, cannot start or stops. `Placement` is
where an instance runs: on one machine every instance runs here (`routing/placement.py`); in
cluster mode only those of the partitions this node leases (`cluster/node.py`). The daemon
picks one at start; the core calls it and never asks which mode it is in.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorInfo
from protocol.events import AgentEvent
from protocol.ids import Address
from protocol.messages import Message


class Deliveries(Protocol):
    """The events of processes, as the router keeps and answers them."""

    def send(self, entry: ProcessEntry, msg: Message) -> bool:
        """One frame to the current process of `entry`, without awaiting; False when it could
        not be routed (counted and logged)."""
        ...

    def flush(self, address: Address) -> None:
        """Deliver the queue of `address` to its ready process, in order."""
        ...

    def fail_queued(
        self, address: Address, error: ErrorInfo, *, requests_only: bool = False
    ) -> int:
        """Answer the queued events of `address` with `error` (with `requests_only`, only
        those someone waits for); how many were answered."""
        ...

    def on_process_dead(self, entry: ProcessEntry, how: str, *, stopping: bool = False) -> None:
        """The process of `entry` is gone: its running turn goes again to the replacement
        (once) or is answered, the rest stays queued in order. `stopping`: the daemon is
        stopping (the turn is kept for the next start, or answered E_AGENT_SHUTTING_DOWN)."""
        ...

    def park_queued(self, address: Address) -> tuple[int, int]:
        """Empty the mailbox of `address` for a stop: (kept, dropped) events."""
        ...


class Placement(Protocol):
    """Where an instance runs, and where what it produces goes."""

    def admits(self, target: Address) -> bool:
        """Whether `target` may run a process on this daemon now."""
        ...

    async def prepare(self, target: Address) -> None:
        """Bring the instance's files up to date before its process starts; raises
        SpawnError when they cannot be."""
        ...

    def route_response(
        self, requester: Address, response: AgentEvent, server: Address | None
    ) -> None:
        """A response for the agent `requester`, sent by the instance `server` (None: by the
        daemon itself): to wherever the requester runs."""
        ...

    def history(self, entry: ProcessEntry, line: bytes) -> bool:
        """A child's conversation line (a `history` frame); False when this placement keeps
        none (one machine: such a frame is unexpected)."""
        ...
