"""Small fakes of the router's seams (`orchestrator.routing.broker`), for unit tests of what sits
behind
them. Integration tests never use these: they run the real router and supervisor."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

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


@dataclass
class FakeTargets:
    """`broker.Targets`: every target is fine unless `refused` names it; starts are recorded."""

    refused: dict[Address, ErrorInfo] = field(default_factory=dict)
    ensured: list[Address] = field(default_factory=list)
    checked: list[tuple[Address, bool]] = field(default_factory=list)
    """(target, whether the event was a request someone waits for), per `check_target`."""

    def check_target(self, target: Address, *, request: bool = False) -> ErrorInfo | None:
        self.checked.append((target, request))
        return self.refused.get(target)

    def ensure(self, target: Address) -> None:
        self.ensured.append(target)


@dataclass
class FakeLifecycle(FakeTargets):
    """`broker.Lifecycle`: frames about a child's life are ignored, `status` ones queued."""

    statuses: asyncio.Queue[StatusPayload] = field(default_factory=asyncio.Queue)
    acks: asyncio.Queue[ShutdownAckPayload] = field(default_factory=asyncio.Queue)

    def on_hello(self, entry: ProcessEntry, payload: HelloPayload) -> None:
        return None

    def on_ready(self, entry: ProcessEntry, payload: ReadyPayload) -> None:
        return None

    def on_start_error(self, entry: ProcessEntry, payload: StartErrorPayload) -> None:
        return None

    def on_status(self, entry: ProcessEntry, payload: StatusPayload) -> None:
        self.statuses.put_nowait(payload)

    def on_shutdown_ack(self, entry: ProcessEntry, payload: ShutdownAckPayload) -> None:
        self.acks.put_nowait(payload)

    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None:
        return None


@dataclass
class FakeBroker:
    """`broker.RequestBroker` that records what it is asked; `ready_entries` are the processes
    it reports ready."""

    ready_entries: dict[Address, ProcessEntry] = field(default_factory=dict)
    submitted: list[tuple[AgentEvent, Address]] = field(default_factory=list)
    responses: list[AgentEvent] = field(default_factory=list)
    interim: list[AgentEvent] = field(default_factory=list)
    sent: list[tuple[ProcessEntry, Message]] = field(default_factory=list)
    replies: list[tuple[ProcessEntry, CallResultPayload]] = field(default_factory=list)
    opened: list[OpenRequest] = field(default_factory=list)

    def submit(
        self, event: AgentEvent, target: Address, waiter: asyncio.Future[AgentEvent] | None = None
    ) -> None:
        self.submitted.append((event, target))

    def respond(self, response: AgentEvent) -> None:
        self.responses.append(response)

    def send(self, entry: ProcessEntry, msg: Message) -> bool:
        self.sent.append((entry, msg))
        return True

    def reply(self, entry: ProcessEntry, result: CallResultPayload) -> None:
        self.replies.append((entry, result))

    def open_request(self, request: OpenRequest) -> None:
        self.opened.append(request)

    def respond_interim(self, response: AgentEvent) -> None:
        self.interim.append(response)

    def ready(self, address: Address) -> ProcessEntry | None:
        return self.ready_entries.get(address)
