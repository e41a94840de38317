"""The seams around the router: what its collaborators may ask of it, and what it asks them.

`orchestrator.routing.router.Router` implements `Broker`, `RequestBroker` and the supervisor's
`Deliveries` (orchestrator/supervision/ports.py). The collaborators it hands frames to (the
connections, the deferred calls, the call handlers) are built before it and reach it through
one `orchestrator.routing.relay.Relay`, as one of these Protocols with just the operations
they use: none of them imports the router, and each is tested against a small fake. The router
takes each of them, required, in its constructor, as the Protocols below:
`orchestrator.supervision.supervisor.Supervisor` implements `Targets` and `Lifecycle`, the
ingress (orchestrator/ingress/port.py) `Intake`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from orchestrator.supervision.mailboxes import OpenRequest
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


ANSWER_EVENT = "deferred.answer"
"""A connector's event carrying a client's JSON-RPC response to a deferred call in
`metadata.rpc` (webhook `POST /rpc`, ARCHITECTURE.md §10); its reply is the resumed turn's."""
CallHandler = Callable[[ProcessEntry, CallPayload], None]
"""Takes a `call` frame of one op; answers it (or not, `model_usage`) through the broker."""


class Intake(Protocol):
    """What the router tells the ingress (orchestrator/ingress/port.py): the events processes
    send, when a turn starts and ends, and what a stop keeps for the next start."""

    def take(
        self, event: AgentEvent, target: Address, answered: Callable[[ErrorInfo | None], None]
    ) -> None:
        """Accept an event a process sent, without awaiting: `answered(None)` once it is
        accepted and submitted, `answered(error)` if it is not."""
        ...

    def started(self, event_id: str) -> None: ...

    def finished(self, event_id: str, reply: AgentEvent | None = None) -> None:
        """The event's turn ended (with its reply when there is one)."""
        ...

    def keep(self, event_id: str, reply: AgentEvent) -> bool:
        """For a stop: whether `event_id` stays accepted for the next start (its attached
        clients hear `reply` now)."""
        ...


class RouteCheck(Protocol):
    """Who may reach whom (orchestrator/calls/agents.py)."""

    def check_route(
        self, caller: Address, target: Address, event: AgentEvent
    ) -> ErrorInfo | None: ...


class ConnectorEvents(Protocol):
    """Connector events through the Connection ingress rules (orchestrator/ingress/)."""

    def on_event(self, entry: ProcessEntry, event: AgentEvent, to: str) -> None: ...


class SuspendedTurns(Protocol):
    """Turns waiting on a client-side call (orchestrator/calls/deferred.py, §10)."""

    def on_ready(self, address: Address) -> None:
        """The process of `address` is ready: it gets the answers recorded for it."""
        ...

    def on_death(self, address: Address, event: AgentEvent) -> bool:
        """True when the turn of `event` waits for a client on disk (its next process
        resumes it: no E_AGENT_CRASHED)."""
        ...

    def on_answer_event(self, entry: ProcessEntry, event: AgentEvent, to: str) -> None:
        """A connector's `deferred.answer` event."""
        ...


class Budget(Protocol):
    """Spending limits (orchestrator/calls/permits.py)."""

    def refuse_event(self, agent: str) -> ErrorInfo | None:
        """Why a new event for `agent` gets no turn (its budget is used up), or None."""
        ...


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


class Hub(RequestBroker, Protocol):
    """Everything the daemon's collaborators ask of the router (what `Relay` passes on)."""

    def accept(
        self,
        event: AgentEvent,
        target: Address,
        answered: Callable[[ErrorInfo | None], None] | None = None,
    ) -> None:
        """A process's event for `target`, through the ingress (journaled first when there
        is a journal), then submitted in acceptance order."""
        ...

    def deliver_response(self, requester: Address, response: AgentEvent) -> None:
        """A response for a process of this daemon: to it now, or queued while it starts."""
        ...

    def flush(self, address: Address) -> None: ...

    def fail_queued(
        self, address: Address, error: ErrorInfo, *, requests_only: bool = False
    ) -> int: ...

    def on_process_dead(self, entry: ProcessEntry, how: str, *, stopping: bool = False) -> None: ...

    def park_queued(self, address: Address) -> tuple[int, int]: ...
