"""The agents ROUTER: every frame between children goes through here (ARCHITECTURE.md §3-5).

Inbound frames are checked in order: two frames, a parseable process id, a current
generation of a live entry (else the frame is stale and dropped), a decodable message. Each
failure is counted and logged with the sender; nothing a peer sends can stop the loop.

The socket itself (drain pattern, sends without awaiting, ROUTER_MANDATORY, the re-check that
edge-triggered ZMQ_FD needs after a send) is `wire.RouterSocket`; an unroutable send is counted
and answered here, never dropped silently.

What the router does not decide itself it hands to the collaborators it is built with, all
required (the supervisor as the `Lifecycle`, the ingress, the placement, a handler per call op,
connector ingress, deferred calls, budgets). The composition root builds them first; those that
reach back get the router through one `orchestrator.routing.relay.Relay`, which this
constructor connects, as the `orchestrator.routing.broker` Protocols the router implements,
so none of them imports this module. Mailboxes and the request book are built first too and
shared with the supervisor (orchestrator/supervision/mailboxes.py).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import assert_never

import structlog

from orchestrator.routing import parking
from orchestrator.routing.broker import (
    ANSWER_EVENT,
    Budget,
    CallHandler,
    ConnectorEvents,
    Intake,
    Lifecycle,
    RouteCheck,
    SuspendedTurns,
)
from orchestrator.routing.deltas import DeltaRoutes
from orchestrator.routing.peers import PeerWatch
from orchestrator.routing.relay import Relay
from orchestrator.routing.wire import PEER_GONE, RouterSocket
from orchestrator.supervision import liveness
from orchestrator.supervision.mailboxes import Mailbox, Mailboxes, OpenRequest, RequestBook
from orchestrator.supervision.ports import Placement
from orchestrator.supervision.states import READY, ProcessStatus
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.codec import decode_message, encode
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent, Source, SourceKind, response_to
from protocol.ids import (
    CONTROL,
    ORCHESTRATOR,
    Address,
    ProcessId,
    ProcessKind,
    parse_address,
    parse_routing_id,
)
from protocol.messages import (
    Call,
    CallOp,
    CallPayload,
    CallResult,
    CallResultPayload,
    Delta,
    Event,
    Heartbeat,
    Hello,
    History,
    Message,
    Ready,
    Shutdown,
    ShutdownAck,
    ShutdownAckPayload,
    StartError,
    Status,
    StatusPayload,
    TurnMetrics,
)

ID_CACHE_MAX = 4096
log = structlog.get_logger("goondan.router")
ORCHESTRATOR_SOURCE = Source(kind=SourceKind.ORCHESTRATOR, name=ORCHESTRATOR)


TurnMetricsSink = Callable[[ProcessEntry, TurnMetrics], None]


@dataclass(frozen=True, slots=True)
class Collaborators:
    """Whom the router hands frames and calls to, all required (the daemon picks each
    implementation once, at start)."""

    lifecycle: Lifecycle
    """Frames about a child's life, and the questions of `submit` (the supervisor)."""
    ingress: Intake
    """Events from processes are accepted through it; it hears when a turn starts and ends."""
    placement: Placement
    """Where a response for an agent goes, and what becomes of `history` frames."""
    calls: Mapping[CallOp, CallHandler]
    """A handler per call op (spawn/list/catalog, send, restart, deferred, permits); an op
    without one is answered E_NOT_IMPLEMENTED."""
    routes: RouteCheck
    """Who may reach whom (the `agents` calls' checks)."""
    connectors: ConnectorEvents
    """Connector events -> Connection ingress rules."""
    suspended: SuspendedTurns
    """Turns waiting on a client-side call (ARCHITECTURE.md §10)."""
    budget: Budget
    """New events for an agent over its budget are answered at once."""
    turn_metrics: TurnMetricsSink
    """Counter deltas of agents' turns (orchestrator/observe/metrics.py, or nothing)."""


@dataclass(slots=True)
class Stats:
    malformed: int = 0
    stale: int = 0
    undeliverable: int = 0
    delivered: int = 0


def _should_log(count: int) -> bool:
    """Log the first ten drops, then every thousandth: a flood must not flood the log."""
    return count <= 10 or count % 1000 == 0


class Router:
    def __init__(
        self,
        wire: RouterSocket,
        table: ProcessTable,
        mailboxes: Mailboxes,
        book: RequestBook,
        relay: Relay,
        with_: Collaborators,
    ) -> None:
        self.table = table
        self.wire = wire
        self.sock = self.wire.sock
        self.peers = PeerWatch(self.sock, "agents", wire.max_frame_bytes, self._spawned)
        self.endpoint = wire.endpoint
        self.mailboxes = mailboxes
        self.book = book
        self.stats = Stats()
        self.services = with_
        self.lifecycle = with_.lifecycle
        self.ingress = with_.ingress
        self.placement = with_.placement
        # routing ids and addresses repeat: parse each once (only what parses is cached)
        self._process_id = functools.lru_cache(maxsize=ID_CACHE_MAX)(parse_routing_id)
        self.address = functools.lru_cache(maxsize=ID_CACHE_MAX)(parse_address)
        """Parse an address (cached); raise ProtocolError."""
        self.deltas = DeltaRoutes(self.book, self.ready, self.send, self.address)
        """Turns' `delta` frames to whoever waits for their reply (ARCHITECTURE.md §4)."""
        relay.connect(self)  # the collaborators built before the router reach it from now on

    def mailbox(self, address: Address) -> Mailbox:
        return self.mailboxes.box(address)

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.peers.run())
            await self.wire.serve(self._on_frames)

    def _spawned(self, pid: int) -> bool:
        """Whether `pid` is one of our children (a foreign peer dropped is worth a line)."""
        return self.table.had_pid(pid)

    def close(self) -> None:
        self.peers.close()
        self.wire.close()

    def _on_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._malformed(frames[0] if frames else b"", f"{len(frames)} frames, want 2")
            return
        ident, data = frames
        try:
            pid = self._process_id(ident)
        except ProtocolError as exc:
            self._malformed(ident, exc.message)
            return
        entry = self.table.get(pid.address)
        if entry is None or entry.generation != pid.generation:
            self._stale(pid)
            return
        if ident != entry.routing_id:  # the right name without this spawn's secret
            self.stats.malformed += 1
            log.warning("frame_impostor", sender=str(pid), dropped=self.stats.malformed)
            return
        try:
            msg = decode_message(data)
        except ProtocolError as exc:
            self._malformed(ident, exc.message)
            return
        if not entry.live:
            self._after_exit(entry, pid, msg)
            return
        entry.last_seen = time.monotonic()
        try:
            self._dispatch(entry, msg)
        except Exception:  # a bug in one handler must not take the broker down
            log.exception("frame_handler_failed", sender=str(pid), type=type(msg).__name__)

    def _after_exit(self, entry: ProcessEntry, pid: ProcessId, msg: Message) -> None:
        """A frame of a process whose exit was seen first: keep what it hands back and wrote."""
        if isinstance(msg, ShutdownAck):
            self._late_ack(entry, msg.payload)
        elif isinstance(msg, History):
            # the last conversation lines of its last turn, already in the files on this
            # node: dropped, the history stream would lack them while the cache looked
            # current (a later owner, rebuilding from the stream, would lose that turn)
            if not self.placement.history(entry, msg.payload.line):
                self._stale(pid)
        else:
            self._stale(pid)

    def _stale(self, pid: ProcessId) -> None:
        self.stats.stale += 1
        if _should_log(self.stats.stale):
            log.info("frame_stale", sender=str(pid), dropped=self.stats.stale)

    def _late_ack(self, entry: ProcessEntry, payload: ShutdownAckPayload) -> None:
        """A drained process's `shutdown_ack`, read after its exit (the pidfd can win the race
        with the last frames): its events were requeued at its exit already
        (`Mailbox.on_death(drained=True)`); the ack is still its own log line."""
        self.lifecycle.on_shutdown_ack(entry, payload)

    def _malformed(self, ident: bytes, reason: str) -> None:
        self.stats.malformed += 1
        if _should_log(self.stats.malformed):
            sender = ident[:80].decode(errors="replace")
            log.warning(
                "frame_malformed", sender=sender, reason=reason, dropped=self.stats.malformed
            )

    def _dispatch(self, entry: ProcessEntry, msg: Message) -> None:
        lifecycle = self.lifecycle
        match msg:
            case Event() | Delta():
                self._on_flow(entry, msg)
            case Status(payload=payload):
                self._on_status(entry, payload)
                lifecycle.on_status(entry, payload)
            case Hello() | Ready() | StartError():
                self._handshake(entry, msg, lifecycle)
            case ShutdownAck(payload=payload):
                self.mailbox(entry.address).requeue(payload.undelivered_events)
                lifecycle.on_shutdown_ack(entry, payload)
            case Call(payload=payload):
                self.services.calls.get(payload.op, self._unhandled)(entry, payload)
            case Heartbeat(payload=beat):
                liveness.on_beat(self.table, entry, beat, self.send)
            case History(payload=payload):  # cluster mode's history stream (§15)
                if not self.placement.history(entry, payload.line):
                    log.warning("frame_unexpected", sender=entry.id_text, type="History")
            case CallResult() | Shutdown():
                log.warning("frame_unexpected", sender=entry.id_text, type=type(msg).__name__)
            case _:
                assert_never(msg)

    def _on_flow(self, entry: ProcessEntry, msg: Event | Delta) -> None:
        """An event, or a piece of the turn in progress for whoever waits for its reply."""
        if isinstance(msg, Event):
            self._on_child_event(entry, msg.to, msg.payload)
        else:
            self.deltas.route(entry, msg.payload)

    @staticmethod
    def _handshake(
        entry: ProcessEntry, msg: Hello | Ready | StartError, lifecycle: Lifecycle
    ) -> None:
        match msg:
            case Hello(payload=payload):
                lifecycle.on_hello(entry, payload)
            case Ready(payload=payload):
                lifecycle.on_ready(entry, payload)
            case StartError(payload=payload):
                lifecycle.on_start_error(entry, payload)

    def _unhandled(self, entry: ProcessEntry, payload: CallPayload) -> None:
        """A call no handler takes (a newer child's op) gets a coded error back, never
        silence, so the calling tool fails at once instead of waiting for its timeout."""
        error = ErrorInfo(
            code=ErrorCode.E_NOT_IMPLEMENTED,
            message=f"the orchestrator has no handler for call {payload.op!r}",
            suggestion="run the agent under a goondan daemon of the same version",
        )
        self.reply(entry, CallResultPayload(call_id=payload.call_id, ok=False, error=error))

    def _on_status(self, entry: ProcessEntry, payload: StatusPayload) -> None:
        if payload.metrics is not None:
            self.services.turn_metrics(entry, payload.metrics)
        if payload.event_id is None:
            return
        box = self.mailbox(entry.address)
        if payload.state == "processing":
            box.mark_started(payload.event_id)
            self.ingress.started(payload.event_id)
        else:
            box.mark_done(payload.event_id)
            self.ingress.finished(payload.event_id)

    def _on_child_event(self, entry: ProcessEntry, to: str, event: AgentEvent) -> None:
        if event.in_reply_to is not None:
            self.mailbox(entry.address).mark_answered(event.in_reply_to)
            self.respond(event)
            return
        services = self.services
        if event.type == ANSWER_EVENT:
            if entry.address.kind is not ProcessKind.CONNECTOR:  # an agent answering itself
                log.warning("deferred_answer_from_agent", sender=entry.id_text, event_id=event.id)
                why = "only a client answers a deferred call (a connector, the CLI)"
                self._reject(event, ErrorCode.E_CALL_FORBIDDEN, why)
                return
            services.suspended.on_answer_event(entry, event, to)  # a client's answer (§10)
            return
        if entry.address.kind is ProcessKind.CONNECTOR:
            services.connectors.on_event(entry, event, to)
            return
        try:
            target = self.address(to)
        except ProtocolError as exc:
            self._reject(event, ErrorCode.E_AGENT_NOT_FOUND, exc.message)
            return
        problem = services.routes.check_route(entry.address, target, event)
        if problem is not None:
            self._reject(event, problem.code, problem.message, problem.suggestion)
            return
        self.accept(event, target)

    def accept(
        self,
        event: AgentEvent,
        target: Address,
        answered: Callable[[ErrorInfo | None], None] | None = None,
    ) -> None:
        """A process's event for `target`: through the ingress (the journal when there is
        one), then submitted in acceptance order; `answered` hears whether it was accepted (by
        default a refusal answers the event's `replyTo` with the coded error)."""

        def refused(error: ErrorInfo | None) -> None:
            if error is not None:
                self._reject(event, error.code, error.message, error.suggestion)

        self.ingress.take(event, target, answered or refused)

    # -- sending ----------------------------------------------------------------------

    def send(self, entry: ProcessEntry, msg: Message) -> bool:
        """Send to the current process of `entry` without awaiting; False (counted, logged)
        when it cannot be routed."""
        return self._send(entry, msg) is None

    def _send(self, entry: ProcessEntry, msg: Message) -> str | None:
        """`send`, saying why it failed."""
        reason = self.wire.send(entry.routing_id, encode(msg))
        if reason is None:
            self.stats.delivered += 1
            return None
        self.stats.undeliverable += 1
        log.warning("undeliverable", to=entry.id_text, type=type(msg).__name__, reason=reason)
        return reason

    def reply(self, entry: ProcessEntry, result: CallResultPayload) -> None:
        self.send(entry, CallResult(from_=ORCHESTRATOR, to=entry.id_text, payload=result))

    def ready(self, address: Address) -> ProcessEntry | None:
        entry = self.table.get(address)
        return entry if entry is not None and entry.status in READY else None

    def submit(
        self,
        event: AgentEvent,
        target: Address,
        waiter: asyncio.Future[AgentEvent] | None = None,
    ) -> None:
        """A new event for `target`: queue it, spawn on demand, deliver when ready."""
        if event.reply_to is not None:
            self.book.open(OpenRequest.of(event, event.reply_to, target, waiter))
        lifecycle = self.lifecycle
        problem = lifecycle.check_target(target, request=self.awaited(event))
        if problem is None:
            problem = self._over_budget(event, target)
        if problem is not None:
            self._answer_error(event, problem)
            return
        self.mailbox(target).queue.append(event)
        entry = self.table.get(target)
        if entry is not None and entry.status in READY:
            self.flush(target)
        else:
            lifecycle.ensure(target)

    def _over_budget(self, event: AgentEvent, target: Address) -> ErrorInfo | None:
        """A new event for an agent whose budget is used up is answered at once: no turn,
        no model call (a response to the agent, or a restart's redelivery, still goes)."""
        if target.kind is not ProcessKind.AGENT or event.in_reply_to is not None:
            return None
        return self.services.budget.refuse_event(target.name)

    def flush(self, address: Address) -> None:
        """Deliver the queue of `address` to its ready process, in order."""
        entry = self.ready(address)
        if entry is None:
            return
        self.services.suspended.on_ready(address)
        box = self.mailboxes.get(address)
        if box is None:
            return
        to = entry.id_text
        events = box.take()
        for i, event in enumerate(events):
            reason = self._send(entry, Event(from_=ORCHESTRATOR, to=to, payload=event))
            if reason == PEER_GONE:
                # Its process closed its socket: it is exiting (a crash whose exit is not seen
                # yet). This event and the rest wait, in order, for the next process.
                box.unsend(events[i:])
                break
            if reason is not None:
                box.mark_done(event.id)
                error = ErrorInfo(code=ErrorCode.E_AGENT_UNDELIVERABLE, message=f"{to} unreachable")
                self._answer_error(event, error)
            elif event.in_reply_to is not None:
                box.mark_done(event.id)  # a queued response runs no turn: nothing to track
        if events:
            liveness.probe_unless_beating(entry, self.send)

    def open_request(self, request: OpenRequest) -> None:
        """Open (or re-open, for a resumed turn) a request. Someone already waiting for its
        next reply (`goondan run --input` behind a client-side call) hears it too."""
        earlier = self.book.get(request.correlation_id)
        waiting = earlier.waiter if earlier is not None else None
        if waiting is not None and not waiting.done() and request.waiter is not None:
            request.waiter.add_done_callback(partial(_pass_on, waiting))
        self.book.open(request)

    def respond_interim(self, response: AgentEvent) -> None:
        request = self.book.get(response.in_reply_to or "")
        if request is not None and request.waiter is not None:
            if not request.waiter.done():
                request.waiter.set_result(response)
            return
        self.respond(response)
        if request is not None:
            self.book.open(request)

    def respond(self, response: AgentEvent) -> None:
        """Route a response by its correlation id to whoever opened the request."""
        request = self.book.close(response.in_reply_to or "")
        if request is None:
            log.info("response_unclaimed", correlation_id=response.in_reply_to)
            return
        self.ingress.finished(request.event_id, response)
        if request.waiter is not None:
            if not request.waiter.done():
                request.waiter.set_result(response)
            return
        if request.requester == CONTROL:  # redelivered after a restart: its client is gone
            return
        try:
            requester = self.address(request.requester)
        except ProtocolError:
            log.warning("response_bad_requester", requester=request.requester)
            return
        if requester.kind is ProcessKind.AGENT:  # in cluster mode its owner may be elsewhere
            self.placement.route_response(requester, response, request.server)
            return
        self.deliver_response(requester, response)

    def deliver_response(self, requester: Address, response: AgentEvent) -> None:
        """A response for a process of this daemon: to it now, or queued while it starts."""
        entry = self.ready(requester)
        if entry is None:
            if requester.kind is ProcessKind.AGENT:
                # the caller stopped (idle timeout, crash): queue the reply and start it again,
                # so an async `agents__request` reply still reaches its durable inbox
                self.mailbox(requester).queue.append(response)
                self.lifecycle.ensure(requester)
                return
            log.info("response_requester_gone", requester=str(requester))
            return
        self.send(entry, Event(from_=ORCHESTRATOR, to=entry.id_text, payload=response))

    def awaited(self, event: AgentEvent) -> bool:
        """Whether someone waits for `event`'s reply now: an agent, a connector, or a control
        client still connected. A `send --no-wait` (or one redelivered after a restart) has a
        `replyTo` only so `--attach` can read its reply later: nobody hears an error at once."""
        if event.reply_to is None:
            return False
        if event.reply_to.target != CONTROL:
            return True
        request = self.book.get(event.reply_to.correlation_id)
        return request is not None and request.waiter is not None and not request.waiter.done()

    def _answer_error(self, request: AgentEvent, error: ErrorInfo) -> None:
        """Answer `request` with `error`; an event nobody waits for is logged as dropped (with
        a `replyTo`, the error is still its reply, kept in the journal for `--attach`)."""
        if not self.awaited(request):
            log.warning("event_dropped", event_id=request.id, code=error.code, reason=error.message)
        if request.reply_to is not None:
            self.respond(response_to(request, source=ORCHESTRATOR_SOURCE, text="", error=error))

    def _reject(
        self, event: AgentEvent, code: str, message: str, suggestion: str | None = None
    ) -> None:
        if event.reply_to is not None:
            self.book.open(OpenRequest.of(event, event.reply_to, None))
        self._answer_error(event, ErrorInfo(code=code, message=message, suggestion=suggestion))

    # -- lifecycle hooks the supervisor calls ------------------------------------------

    def on_process_dead(self, entry: ProcessEntry, how: str, *, stopping: bool = False) -> None:
        """The process of `entry` is gone: its running turn goes again to the replacement
        (once), the rest is kept in order; when the daemon is `stopping` (or the instance is
        handed to another cluster node), the turn is kept for the next start or owner (or
        answered E_AGENT_SHUTTING_DOWN), never reported as a crash."""
        box = self.mailboxes.get(entry.address)
        if box is None:
            return
        stopped = entry.status is ProcessStatus.DRAINING
        crashed = box.on_death(drained=stopped)
        if crashed is None:
            return
        if self.services.suspended.on_death(entry.address, crashed):
            return  # its turn waits for a client on disk: the next process resumes it
        if stopping:  # a forced stop (or a grace run out) ended the turn, not a crash
            parking.park(self.book, self.ingress, self.respond, crashed)
            return
        # Not when the daemon ended it (a stop, a wedge): the next process would do the same.
        if not stopped and not entry.killed and box.retry(crashed):
            log.warning("event_retried", event_id=crashed.id, process=entry.id_text, how=how)
            return
        error = ErrorInfo(
            code=ErrorCode.E_AGENT_CRASHED,
            message=f"{entry.process_id} ({how}) died while handling event {crashed.id}",
            suggestion="the agent is restarted; send the request again",
        )
        self._answer_error(crashed, error)

    def fail_queued(
        self, address: Address, error: ErrorInfo, *, requests_only: bool = False
    ) -> int:
        """Answer the queued events of `address` with `error` (with `requests_only`, only
        those someone waits for; the others stay queued for the next process)."""
        box = self.mailboxes.get(address)
        if box is None:
            return 0
        events = box.drain_queue()
        for event in events:
            if requests_only and not self.awaited(event):
                box.queue.append(event)
            else:
                self._answer_error(event, error)
        return len(events) - len(box.queue)

    def park_queued(self, address: Address) -> tuple[int, int]:
        """Empty the mailbox of `address` for a stop: (kept, dropped) events."""
        return parking.park_queued(self.mailboxes, self.book, self.ingress, self.respond, address)


def _pass_on(to: asyncio.Future[AgentEvent], done: asyncio.Future[AgentEvent]) -> None:
    if not to.done() and not done.cancelled():
        to.set_result(done.result())
