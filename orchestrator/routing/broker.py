"""The seams around the router: what its services may ask of it, and what it asks the supervisor.

`orchestrator.routing.router.Router` implements `Broker` and `RequestBroker`. The services it hands
frames to (`connections`, `deferred_calls`, `self_restart`) get it through their constructor
as one of these Protocols, with just the operations they use: none of them imports the router,
and each is tested against a small fake. `orchestrator.supervision.supervisor.Supervisor` implements
`Targets` and `Lifecycle`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from orchestrator.routing.mailboxes import OpenRequest
from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorInfo
from protocol.events import AgentEvent
from protocol.ids import Address
from protocol.messages import (
    CallPayload,
    CallResultPayload,
    HelloPayload,
    Message,
    ReadyPayload,
    ShutdownAckPayload,
    StartErrorPayload,
    StatusPayload,
)


class Targets(Protocol):
    """Whether an event may go to a process, and starting that process (the supervisor)."""

    def check_target(self, target: Address, *, request: bool = False) -> ErrorInfo | None:
        """Why an event for `target` cannot be taken now (None: it can)."""
        ...

    def ensure(self, target: Address) -> None:
        """Start the process of `target` unless it runs, backs off or is held down."""
        ...


class Lifecycle(Targets, Protocol):
    """What the router tells the supervisor about frames from children."""

    def on_hello(self, entry: ProcessEntry, payload: HelloPayload) -> None: ...
    def on_ready(self, entry: ProcessEntry, payload: ReadyPayload) -> None: ...
    def on_start_error(self, entry: ProcessEntry, payload: StartErrorPayload) -> None: ...
    def on_status(self, entry: ProcessEntry, payload: StatusPayload) -> None: ...
    def on_shutdown_ack(self, entry: ProcessEntry, payload: ShutdownAckPayload) -> None: ...
    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None: ...


class Broker(Protocol):
    """Routing events and answering processes."""

    def submit(
        self, event: AgentEvent, target: Address, waiter: asyncio.Future[AgentEvent] | None = None
    ) -> None:
        """A new event for `target`: queue it, start the process on demand, deliver when ready
        (a request's reply resolves `waiter` when one is given)."""
        ...

    def respond(self, response: AgentEvent) -> None:
        """Route a response by its correlation id to whoever opened the request; closes it."""
        ...

    def send(self, entry: ProcessEntry, msg: Message) -> bool:
        """One frame to the current process of `entry`, without awaiting; False when it could
        not be routed (counted and logged)."""
        ...

    def reply(self, entry: ProcessEntry, result: CallResultPayload) -> None:
        """Answer a `call` the process of `entry` made."""
        ...


class RequestBroker(Broker, Protocol):
    """Routing plus the open-request book, for a service that answers requests in steps (a
    deferred call's notice now, the resumed turn's reply later)."""

    def open_request(self, request: OpenRequest) -> None:
        """Expect a response with `request.correlation_id`, for `request.requester`."""
        ...

    def respond_interim(self, response: AgentEvent) -> None:
        """Deliver `response` to whoever opened its request, but keep the request open: the
        final reply comes later."""
        ...

    def ready(self, address: Address) -> ProcessEntry | None:
        """The process of `address` if it is ready for frames."""
        ...
