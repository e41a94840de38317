"""The one late hand-off of the composition root (ARCHITECTURE.md §5).

The router takes all its collaborators (supervisor, ingress, placement, call handlers ...),
required, in its constructor; most of them route events or answer processes themselves, so
they need the router too. They get this `Relay` instead, built first, as the `Broker`,
`RequestBroker` or `Deliveries` Protocol they use; the router's constructor connects it to
itself. Before that, a call through it is a bug of the composition root and raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from orchestrator.routing.broker import Hub
from orchestrator.supervision.mailboxes import OpenRequest
from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorInfo
from protocol.events import AgentEvent
from protocol.ids import Address
from protocol.messages import CallResultPayload, Message


class RelayNotConnected(RuntimeError):
    """A collaborator used the router before the composition root built it."""


class _Unconnected:
    def __getattr__(self, name: str) -> object:
        raise RelayNotConnected(f"router.{name} used before the router was built")


class Relay:
    def __init__(self) -> None:
        self._hub = cast(Hub, _Unconnected())  # raises on any use

    def connect(self, hub: Hub) -> None:
        """The router's constructor, once."""
        if not isinstance(self._hub, _Unconnected):
            raise RuntimeError("a relay is connected to one router, once")
        self._hub = hub

    def submit(
        self, event: AgentEvent, target: Address, waiter: asyncio.Future[AgentEvent] | None = None
    ) -> None:
        self._hub.submit(event, target, waiter)

    def accept(
        self,
        event: AgentEvent,
        target: Address,
        answered: Callable[[ErrorInfo | None], None] | None = None,
    ) -> None:
        self._hub.accept(event, target, answered)

    def respond(self, response: AgentEvent) -> None:
        self._hub.respond(response)

    def respond_interim(self, response: AgentEvent) -> None:
        self._hub.respond_interim(response)

    def open_request(self, request: OpenRequest) -> None:
        self._hub.open_request(request)

    def deliver_response(self, requester: Address, response: AgentEvent) -> None:
        self._hub.deliver_response(requester, response)

    def send(self, entry: ProcessEntry, msg: Message) -> bool:
        return self._hub.send(entry, msg)

    def reply(self, entry: ProcessEntry, result: CallResultPayload) -> None:
        self._hub.reply(entry, result)

    def ready(self, address: Address) -> ProcessEntry | None:
        return self._hub.ready(address)

    def flush(self, address: Address) -> None:
        self._hub.flush(address)

    def fail_queued(
        self, address: Address, error: ErrorInfo, *, requests_only: bool = False
    ) -> int:
        return self._hub.fail_queued(address, error, requests_only=requests_only)

    def on_process_dead(self, entry: ProcessEntry, how: str, *, stopping: bool = False) -> None:
        self._hub.on_process_dead(entry, how, stopping=stopping)

    def park_queued(self, address: Address) -> tuple[int, int]:
        return self._hub.park_queued(address)
