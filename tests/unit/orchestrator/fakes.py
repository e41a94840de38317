"""Small fakes of the router's seams (`orchestrator.routing.broker`), for unit tests of what sits
behind them, and `build_router`: a real router whose collaborators are these fakes (or real
ones a test passes). Integration tests never use these: they run the real router and
supervisor."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import zmq.asyncio

from orchestrator.ingress.direct import DirectIngress
from orchestrator.routing.broker import CallHandler, Intake, Lifecycle, SuspendedTurns
from orchestrator.routing.placement import LocalPlacement
from orchestrator.routing.relay import Relay
from orchestrator.routing.router import Collaborators, Router
from orchestrator.routing.wire import RouterSocket
from orchestrator.supervision.mailboxes import Mailboxes, OpenRequest, RequestBook
from orchestrator.supervision.ports import Placement
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from orchestrator.swarm.view import CurrentSwarm, SwarmView
from protocol.errors import ErrorInfo
from protocol.events import AgentEvent
from protocol.ids import Address
from protocol.messages import (
    CallOp,
    CallResultPayload,
    HelloPayload,
    Message,
    ReadyPayload,
    ShutdownAckPayload,
    StartErrorPayload,
    StatusPayload,
    TurnMetrics,
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


class AnyRoute:
    """`broker.RouteCheck`: everyone may reach everyone."""

    def check_route(self, caller: Address, target: Address, event: AgentEvent) -> ErrorInfo | None:
        return None


@dataclass
class FakeConnectors:
    """`broker.ConnectorEvents` that records connector events."""

    events: list[tuple[AgentEvent, str]] = field(default_factory=list)

    def on_event(self, entry: ProcessEntry, event: AgentEvent, to: str) -> None:
        self.events.append((event, to))


class NoSuspendedTurns:
    """`broker.SuspendedTurns` with no turn waiting for a client."""

    def on_ready(self, address: Address) -> None:
        return None

    def on_death(self, address: Address, event: AgentEvent) -> bool:
        return False

    def on_answer_event(self, entry: ProcessEntry, event: AgentEvent, to: str) -> None:
        return None


class NoBudget:
    """`broker.Budget` that refuses nothing."""

    def refuse_event(self, agent: str) -> ErrorInfo | None:
        return None


def _uncounted(entry: ProcessEntry, report: TurnMetrics) -> None:
    return None


def build_router(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    table: ProcessTable,
    lifecycle: Lifecycle,
    *,
    mailboxes: Mailboxes | None = None,
    relay: Relay | None = None,
    ingress: Intake | None = None,
    placement: Placement | None = None,
    suspended: SuspendedTurns | None = None,
    calls: Mapping[CallOp, CallHandler] | None = None,
) -> Router:
    """A real router on `endpoint` whose collaborators are fakes, or what the test passes (a
    `relay` and `mailboxes` the test's own collaborators were built with)."""
    relay = relay or Relay()
    collaborators = Collaborators(
        lifecycle=lifecycle,
        ingress=ingress or DirectIngress(relay.submit),
        placement=placement or LocalPlacement(relay.deliver_response),
        calls=calls or {},
        routes=AnyRoute(),
        connectors=FakeConnectors(),
        suspended=suspended or NoSuspendedTurns(),
        budget=NoBudget(),
        turn_metrics=_uncounted,
    )
    wire = RouterSocket(ctx, endpoint)
    return Router(wire, table, mailboxes or Mailboxes(), RequestBook(), relay, collaborators)


def swarm_of(agent: str = "a", name: str = "s") -> CurrentSwarm:
    """A swarm of one agent and no Connections."""
    return CurrentSwarm(SwarmView(name, agent, name, (agent,)))
