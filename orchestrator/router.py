"""The agents ROUTER: every frame between children goes through here (ARCHITECTURE.md §3-5).

Inbound frames are checked in order: two frames, a parseable process id, a current
generation of a live entry (else the frame is stale and dropped), a decodable message. Each
failure is counted and logged with the sender; nothing a peer sends can stop the loop.

The socket itself (drain pattern, sends without awaiting, ROUTER_MANDATORY, the re-check that
edge-triggered ZMQ_FD needs after a send) is `wire.RouterSocket`; an unroutable send is counted
and answered here, never dropped silently.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, assert_never

import structlog
import zmq
import zmq.asyncio

from orchestrator.agents_calls import AGENT_OPS, AgentsService
from orchestrator.connections import Connections
from orchestrator.deferred_calls import ANSWER_EVENT, DEFERRED_OPS, DeferredIndex
from orchestrator.delivery import Mailbox, OpenRequest, RequestBook
from orchestrator.states import READY
from orchestrator.table import ProcessEntry, ProcessTable
from orchestrator.wire import RouterSocket
from protocol.codec import decode_message, encode
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent, Source, SourceKind, response_to
from protocol.ids import (
    ORCHESTRATOR,
    Address,
    ProcessId,
    ProcessKind,
    parse_address,
    parse_process_id,
)
from protocol.messages import (
    Call,
    CallOp,
    CallPayload,
    CallResult,
    Event,
    Heartbeat,
    Hello,
    HelloPayload,
    Message,
    Ready,
    ReadyPayload,
    Shutdown,
    ShutdownAck,
    ShutdownAckPayload,
    StartError,
    StartErrorPayload,
    Status,
    StatusPayload,
)

ID_CACHE_MAX = 4096
log = structlog.get_logger("goondan.router")
ORCHESTRATOR_SOURCE = Source(kind=SourceKind.ORCHESTRATOR, name=ORCHESTRATOR)


class Lifecycle(Protocol):
    """What the router tells the supervisor (and asks it)."""

    def check_target(self, target: Address, *, request: bool = False) -> ErrorInfo | None: ...
    def ensure(self, target: Address) -> None: ...
    def on_hello(self, entry: ProcessEntry, payload: HelloPayload) -> None: ...
    def on_ready(self, entry: ProcessEntry, payload: ReadyPayload) -> None: ...
    def on_start_error(self, entry: ProcessEntry, payload: StartErrorPayload) -> None: ...
    def on_status(self, entry: ProcessEntry, payload: StatusPayload) -> None: ...
    def on_shutdown_ack(self, entry: ProcessEntry, payload: ShutdownAckPayload) -> None: ...
    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None: ...


class Stats:
    __slots__ = ("delivered", "malformed", "stale", "undeliverable")

    def __init__(self) -> None:
        self.malformed = 0
        self.stale = 0
        self.undeliverable = 0
        self.delivered = 0


def _should_log(count: int) -> bool:
    """Log the first ten drops, then every thousandth: a flood must not flood the log."""
    return count <= 10 or count % 1000 == 0


class Router:
    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, table: ProcessTable) -> None:
        self.table = table
        self.wire = RouterSocket(ctx, endpoint)
        self.sock = self.wire.sock
        self.endpoint = endpoint
        self.lifecycle: Lifecycle | None = None
        self.agents: AgentsService | None = None
        """The `agents` tool's checks and calls (spawn/list/catalog); set by the daemon."""
        self.connections: Connections | None = None
        """Connector events -> Connection ingress rules; set by the daemon."""
        self.self_restart: Callable[[ProcessEntry, CallPayload], None] | None = None
        """The `restart` call of the self-restart tool; set by the daemon with the reloader."""
        self.deferred: DeferredIndex | None = None
        """Pending deferred tool calls (ARCHITECTURE.md §10); set by the daemon."""
        self.mailboxes: dict[Address, Mailbox] = {}
        self.book = RequestBook()
        self.stats = Stats()
        self._ids: dict[bytes, ProcessId] = {}
        self._addresses: dict[str, Address] = {}

    def _process_id(self, ident: bytes) -> ProcessId:
        """Parse a routing id (cached; only ids that parse are cached, and a bounded number)."""
        pid = self._ids.get(ident)
        if pid is None:
            pid = parse_process_id(ident)
            if len(self._ids) >= ID_CACHE_MAX:
                self._ids.clear()
            self._ids[ident] = pid
        return pid

    def address(self, text: str) -> Address:
        """Parse an address (cached like routing ids); raise ProtocolError."""
        found = self._addresses.get(text)
        if found is None:
            found = parse_address(text)
            if len(self._addresses) >= ID_CACHE_MAX:
                self._addresses.clear()
            self._addresses[text] = found
        return found

    def mailbox(self, address: Address) -> Mailbox:
        box = self.mailboxes.get(address)
        if box is None:
            box = self.mailboxes[address] = Mailbox()
        return box

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        await self.wire.serve(self._on_frames)

    def close(self) -> None:
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
        if entry is None or entry.generation != pid.generation or not entry.live:
            self.stats.stale += 1
            if _should_log(self.stats.stale):
                log.info("frame_stale", sender=str(pid), dropped=self.stats.stale)
            return
        try:
            msg = decode_message(data)
        except ProtocolError as exc:
            self._malformed(ident, exc.message)
            return
        entry.last_seen = time.monotonic()
        try:
            self._dispatch(entry, msg)
        except Exception:  # a bug in one handler must not take the broker down
            log.exception("frame_handler_failed", sender=str(pid), type=type(msg).__name__)

    def _malformed(self, ident: bytes, reason: str) -> None:
        self.stats.malformed += 1
        if _should_log(self.stats.malformed):
            sender = ident[:80].decode(errors="replace")
            log.warning(
                "frame_malformed", sender=sender, reason=reason, dropped=self.stats.malformed
            )

    def _dispatch(self, entry: ProcessEntry, msg: Message) -> None:
        lifecycle = self.lifecycle
        assert lifecycle is not None, "the composition root sets the lifecycle"
        match msg:
            case Event(payload=event):
                self._on_child_event(entry, msg.to, event)
            case Status(payload=payload):
                self._on_status(entry, payload)
                lifecycle.on_status(entry, payload)
            case Hello(payload=payload):
                lifecycle.on_hello(entry, payload)
            case Ready(payload=payload):
                lifecycle.on_ready(entry, payload)
            case StartError(payload=payload):
                lifecycle.on_start_error(entry, payload)
            case ShutdownAck(payload=payload):
                self.mailbox(entry.address).requeue(payload.undelivered_events)
                lifecycle.on_shutdown_ack(entry, payload)
            case Call(payload=payload):
                self._on_call(entry, payload, lifecycle)
            case Heartbeat(payload=beat):
                # each child's beat is answered: children beat on their own timers (spread by
                # when they started), so no broadcast wakes 1,000 of them in the same instant
                self.send(entry, Heartbeat(from_=ORCHESTRATOR, to=entry.id_text, payload=beat))
            case CallResult() | Shutdown():
                log.warning("frame_unexpected", sender=entry.id_text, type=type(msg).__name__)
            case _:
                assert_never(msg)

    def _on_call(self, entry: ProcessEntry, payload: CallPayload, lifecycle: Lifecycle) -> None:
        if payload.op is CallOp.RESTART and self.self_restart is not None:
            self.self_restart(entry, payload)
            return
        if payload.op in DEFERRED_OPS and self.deferred is not None:
            self.deferred.on_call(entry, payload)
            return
        if self.agents is None or payload.op not in AGENT_OPS:
            lifecycle.on_call(entry, payload)
            return
        result = self.agents.answer(entry.address, payload)
        self.send(entry, CallResult(from_=ORCHESTRATOR, to=entry.id_text, payload=result))

    def _on_status(self, entry: ProcessEntry, payload: StatusPayload) -> None:
        if payload.event_id is None:
            return
        box = self.mailbox(entry.address)
        if payload.state == "processing":
            box.mark_started(payload.event_id)
        else:
            box.mark_done(payload.event_id)

    def _on_child_event(self, entry: ProcessEntry, to: str, event: AgentEvent) -> None:
        if event.in_reply_to is not None:
            self.mailbox(entry.address).mark_answered(event.in_reply_to)
            self.respond(event)
            return
        if event.type == ANSWER_EVENT and self.deferred is not None:
            self.deferred.on_answer_event(event)  # a client's JSON-RPC answer (ARCHITECTURE.md §10)
            return
        if entry.address.kind is ProcessKind.CONNECTOR and self.connections is not None:
            self.connections.on_event(entry, event)
            return
        try:
            target = self.address(to)
        except ProtocolError as exc:
            self._reject(event, ErrorCode.E_AGENT_NOT_FOUND, exc.message)
            return
        problem = self.agents.check_route(entry.address, target, event) if self.agents else None
        if problem is not None:
            self._reject(event, problem.code, problem.message, problem.suggestion)
            return
        self.submit(event, target)

    # -- sending ----------------------------------------------------------------------

    def send(self, entry: ProcessEntry, msg: Message) -> bool:
        """Send to the current process of `entry` without awaiting; False (counted, logged)
        when it cannot be routed."""
        reason = self.wire.send(entry.routing_id, encode(msg))
        if reason is None:
            self.stats.delivered += 1
            return True
        self.stats.undeliverable += 1
        log.warning("undeliverable", to=entry.id_text, type=type(msg).__name__, reason=reason)
        return False

    def submit(
        self,
        event: AgentEvent,
        target: Address,
        waiter: asyncio.Future[AgentEvent] | None = None,
    ) -> None:
        """A new event for `target`: queue it, spawn on demand, deliver when ready."""
        if event.reply_to is not None:
            request = OpenRequest(
                correlation_id=event.reply_to.correlation_id,
                requester=event.reply_to.target,
                server=target,
                event_id=event.id,
                waiter=waiter,
            )
            self.book.open(request)
        assert self.lifecycle is not None
        problem = self.lifecycle.check_target(target, request=event.reply_to is not None)
        if problem is not None:
            self._answer_error(event, problem)
            return
        self.mailbox(target).queue.append(event)
        entry = self.table.get(target)
        if entry is not None and entry.status in READY:
            self.flush(target)
        else:
            self.lifecycle.ensure(target)

    def flush(self, address: Address) -> None:
        """Deliver the queue of `address` to its ready process, in order."""
        entry = self.table.get(address)
        box = self.mailboxes.get(address)
        if self.deferred is not None and entry is not None and entry.status in READY:
            self.deferred.on_ready(address)
        if entry is None or box is None or entry.status not in READY:
            return
        to = entry.id_text
        for event in box.take():
            if not self.send(entry, Event(from_=ORCHESTRATOR, to=to, payload=event)):
                box.mark_done(event.id)
                error = ErrorInfo(code=ErrorCode.E_AGENT_UNDELIVERABLE, message=f"{to} unreachable")
                self._answer_error(event, error)
            elif event.in_reply_to is not None:
                box.mark_done(event.id)  # a queued response runs no turn: nothing to track

    def respond(self, response: AgentEvent) -> None:
        """Route a response by its correlation id to whoever opened the request."""
        request = self.book.close(response.in_reply_to or "")
        if request is None:
            log.info("response_unclaimed", correlation_id=response.in_reply_to)
            return
        if request.waiter is not None:
            if not request.waiter.done():
                request.waiter.set_result(response)
            return
        try:
            requester = self.address(request.requester)
        except ProtocolError:
            log.warning("response_bad_requester", requester=request.requester)
            return
        entry = self.table.get(requester)
        if entry is None or entry.status not in READY:
            if requester.kind is ProcessKind.AGENT and self.lifecycle is not None:
                # the caller stopped (idle timeout, crash): queue the reply and start it again,
                # so an async `agents__request` reply still reaches its durable inbox
                self.mailbox(requester).queue.append(response)
                self.lifecycle.ensure(requester)
                return
            log.info("response_requester_gone", requester=request.requester)
            return
        self.send(entry, Event(from_=ORCHESTRATOR, to=entry.id_text, payload=response))

    def _answer_error(self, request: AgentEvent, error: ErrorInfo) -> None:
        if request.reply_to is None:
            log.warning("event_dropped", event_id=request.id, code=error.code, reason=error.message)
            return
        self.respond(response_to(request, source=ORCHESTRATOR_SOURCE, text="", error=error))

    def _reject(
        self, event: AgentEvent, code: str, message: str, suggestion: str | None = None
    ) -> None:
        if event.reply_to is not None:
            self.book.open(
                OpenRequest(
                    correlation_id=event.reply_to.correlation_id,
                    requester=event.reply_to.target,
                    server=None,
                    event_id=event.id,
                )
            )
        self._answer_error(event, ErrorInfo(code=code, message=message, suggestion=suggestion))

    # -- lifecycle hooks the supervisor calls ------------------------------------------

    def on_process_dead(self, entry: ProcessEntry, how: str) -> None:
        """The process of `entry` is gone: answer its running request, keep the rest."""
        box = self.mailboxes.get(entry.address)
        if box is None:
            return
        crashed = box.on_death()
        suspended = self.deferred.on_death if self.deferred is not None else None
        if crashed is not None and suspended is not None and suspended(entry.address, crashed):
            return  # its turn waits for a client on disk: the next process resumes it
        if crashed is not None:
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
        those that carry `replyTo`; the others stay queued for the next process)."""
        box = self.mailboxes.get(address)
        if box is None:
            return 0
        events = box.drain_queue()
        for event in events:
            if requests_only and event.reply_to is None:
                box.queue.append(event)
            else:
                self._answer_error(event, error)
        return len(events) - len(box.queue)
