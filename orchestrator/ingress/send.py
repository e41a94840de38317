"""`goondan send` on the daemon's side: accept the input (journaled first), wait for its reply;
and `goondan send --attach ID`: the reply of an input sent before, waiting while it runs.

An input with an `idempotency_key` seen within 24 h is the first one: the same event id and,
when it finished, the same reply. A wait that times out leaves the event accepted; the message
says how to attach to it again. A `stream` send asks the agent for the turn's deltas
(`replyTo.stream`) and has them handed to its `ClientStream` until the reply is there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from orchestrator.calls.deferred import DeferredIndex
from orchestrator.ingress.journal import Appended, JournalError
from orchestrator.ingress.port import Ingress
from orchestrator.ingress.streams import ClientStream
from orchestrator.routing.router import Router
from orchestrator.supervision.states import ProcessStatus
from orchestrator.swarm.view import CurrentSwarm
from protocol.control import Attach, SendText
from protocol.errors import ErrorCode, ProtocolError
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event
from protocol.ids import CONTROL, Address, agent_address, check_instance_key
from protocol.jsontypes import JsonObject


class SendContext(Protocol):
    """What sending needs of the control server's context."""

    @property
    def router(self) -> Router: ...
    @property
    def swarm(self) -> CurrentSwarm: ...
    @property
    def acceptor(self) -> Ingress: ...
    @property
    def deferred(self) -> DeferredIndex: ...


log = structlog.get_logger("goondan.control")
CLI_SOURCE = Source(kind=SourceKind.CLI, name="goondan")
Answer = AgentEvent | str | JsonObject


Notify = Callable[[str], Awaitable[None]]


async def quiet(_text: str) -> None:
    """A Notify that tells no one (callers without a client to tell)."""
    return None


def why_waiting(ctx: SendContext, target: Address, event_id: str) -> str | None:
    """Why an input for `target` will not be answered at once: a client-side call its
    instance waits for, or a turn ahead of it."""
    calls = ctx.deferred.pending_for(target)
    if calls:
        call = calls[0]
        return f"waiting for call {call.id} ({call.method}) to be answered (goondan calls list)"
    entry = ctx.router.table.get(target)
    box = ctx.router.mailboxes.get(target)
    if entry is None or box is None or entry.status is not ProcessStatus.PROCESSING:
        return None
    if box.started == event_id:
        return None
    turn = f"turn {box.started}" if box.started else "the turn in progress"
    return f"waiting behind {turn} of {target.name}@{target.instance_key}"


class SendFailed(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def answer(
    ctx: SendContext,
    req: SendText | Attach,
    notify: Notify = quiet,
    stream: ClientStream | None = None,
    accepted: Notify = quiet,
) -> Answer:
    """`accepted` hears the event id of a waiting send that asked to `announce` it."""
    if isinstance(req, Attach):
        return await attach(ctx, req)
    if stream is None:
        return await send_and_wait(ctx, req, notify, accepted=accepted)
    if not req.wait:
        raise SendFailed(
            ErrorCode.E_CONTROL_BAD_REQUEST,
            "a streaming send waits for its reply: drop `stream` or keep `wait`",
        )
    _, event = _event_of(ctx, req)  # its correlation id is watched before it can be accepted
    assert event.reply_to is not None
    deltas = ctx.router.deltas
    deltas.watch(event.reply_to.correlation_id, stream.push)
    try:
        return await send_and_wait(ctx, req, notify, event, accepted)
    finally:
        deltas.unwatch(event.reply_to.correlation_id)


async def send_and_wait(
    ctx: SendContext,
    req: SendText,
    notify: Notify = quiet,
    made: AgentEvent | None = None,
    accepted: Notify = quiet,
) -> Answer:
    """Accept one input (journaled before anything is said); with `wait`, return the response
    event, else the event id. A repeated `idempotency_key` is the first send. `made` is the
    event of `req` when the caller built it already (`_event_of`)."""
    target, event = _event_of(ctx, req, made)
    waiter: asyncio.Future[AgentEvent] | None = None
    if req.wait:
        waiter = asyncio.get_running_loop().create_future()
    dedupe = f"{CONTROL}:{req.idempotency_key}" if req.idempotency_key else None
    appended = await _accept(ctx, event, target, waiter, dedupe)
    if appended is not None and appended.duplicate:
        first = appended.entry.event.id
        log.info("send_duplicate", event_id=first, idempotency_key=req.idempotency_key)
        if not req.wait:
            return first
        if req.announce:
            await accepted(first)
        return await attach(ctx, Attach(request_id=req.request_id, event_id=first,
                                        timeout_ms=req.timeout_ms))  # fmt: skip
    if waiter is None:
        return event.id
    if req.announce:  # a client that stops waiting can still name the input it sent
        await accepted(event.id)
    why = why_waiting(ctx, target, event.id)
    if why is not None:  # the client hears now why its reply is not there in a second
        await notify(why)
    try:
        async with asyncio.timeout(req.timeout_ms / 1000):
            return await waiter
    except TimeoutError:
        assert event.reply_to is not None
        ctx.router.book.close(event.reply_to.correlation_id)
        raise SendFailed(
            ErrorCode.E_AGENT_TIMEOUT,
            f"{target} did not answer within {req.timeout_ms} ms; the event stays accepted: "
            f"`goondan send --attach {event.id}` waits for its reply",
        ) from None


async def _accept(
    ctx: SendContext,
    event: AgentEvent,
    target: Address,
    waiter: asyncio.Future[AgentEvent] | None,
    dedupe_key: str | None,
) -> Appended | None:
    try:
        return await ctx.acceptor.accept(event, target, waiter=waiter, dedupe_key=dedupe_key)
    except JournalError as exc:
        raise _failed(exc) from None


def _failed(exc: JournalError) -> SendFailed:
    return SendFailed(ErrorCode(exc.code), f"{exc.message} ({exc.suggestion})")


async def attach(ctx: SendContext, req: Attach) -> AgentEvent | JsonObject:
    """The reply of an accepted event, waiting while its turn runs."""
    try:
        found = await ctx.acceptor.attach(req.event_id)
    except JournalError as exc:  # e.g. a cluster's `replies` bucket that does not answer
        raise _failed(exc) from None
    if found is None:
        raise SendFailed(
            ErrorCode.E_EVENT_NOT_FOUND,
            f"no event {req.event_id} in the journal: never accepted here, or finished more "
            "than 10 minutes ago (its reply is in the conversation: goondan instance show)",
        )
    entry, future = found
    reply = entry.reply
    if future is not None:
        try:
            async with asyncio.timeout(req.timeout_ms / 1000):
                reply = await future
        except TimeoutError:
            why = f"event {req.event_id} is still running after {req.timeout_ms} ms"
            raise SendFailed(ErrorCode.E_AGENT_TIMEOUT, f"{why}; attach again later") from None
    return reply if reply is not None else {"eventId": req.event_id, "finished": True}


def pending_call(reply: AgentEvent) -> JsonObject | None:
    """The JSON-RPC request of a client-side call, when `reply` is its interim reply."""
    deferred = (reply.metadata or {}).get("deferred")
    return deferred if isinstance(deferred, dict) else None


async def follow(ctx: SendContext, interim: AgentEvent, timeout_s: float) -> AgentEvent:
    """The next reply of a turn whose last reply was a pending client-side call: its request
    stays open in the book until the turn ends, so a new waiter hears what comes next (the
    final reply, or the next call)."""
    open_ = ctx.router.book.get(interim.in_reply_to or "")
    if open_ is None:
        raise SendFailed(ErrorCode.E_EVENT_NOT_FOUND, "the turn's request is no longer open")
    waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
    ctx.router.book.open(dataclasses.replace(open_, waiter=waiter))
    try:
        async with asyncio.timeout(timeout_s):
            return await waiter
    except TimeoutError:
        raise SendFailed(ErrorCode.E_AGENT_TIMEOUT, f"no answer to the pending call within "
                         f"{timeout_s:g} s; it stays pending on disk") from None  # fmt: skip


def _event_of(
    ctx: SendContext, req: SendText, made: AgentEvent | None = None
) -> tuple[Address, AgentEvent]:
    view = ctx.swarm.view
    agent = req.agent or view.entry_agent
    try:
        key = check_instance_key(req.instance_key or view.default_instance_key)
    except ProtocolError as exc:
        raise SendFailed(ErrorCode.E_AGENT_INVALID_INSTANCE_KEY, exc.message) from None
    target = agent_address(agent, key)
    if made is not None:
        return target, made
    correlation_id = uuid.uuid4().hex
    # also without `wait`: the reply is then kept in the journal for `--attach`
    reply_to = ReplyTo(target=CONTROL, correlation_id=correlation_id, stream=req.stream)
    event = new_event(
        type=req.event_type,
        input=req.text,
        instance_key=key,
        source=CLI_SOURCE,
        reply_to=reply_to,
        metadata=req.metadata,
    )
    return target, event
