"""The `agents` bridge inside a child: inter-agent calls as frames through the orchestrator.

`request` sends an event with `replyTo` and waits for the response routed back by its
correlation id (or the orchestrator's coded error, e.g. E_AGENT_CRASHED); with `async_` it
returns at once and the reply goes to the durable inbox (agent_process.inbox), from which the
turn engine injects it before the next step; `send` does not wait; `spawn`/`list`/`catalog` are
`call` frames answered by `call_result`.

The event carries the caller's trace (its span is the caller's tool-call span, so the callee's
turn is that span's child), the caller's `auth` unchanged, and `metadata.callChain`: the
callers waiting above this request, which the orchestrator uses to refuse a cycle.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import structlog

from agent_process.inbox import Inbox
from agent_process.permit_ahead import Ahead
from bundles.sdk import JsonObject, ToolFailed
from protocol.codec import to_builtins
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, ReplyTo, Source, TraceContext, new_event
from protocol.ids import ORCHESTRATOR, agent_address
from protocol.messages import Call, CallOp, CallPayload, CallResultPayload, Event, Message

Send = Callable[[Message], Awaitable[None]]
CALL_CHAIN = "callChain"
CURRENT_SPAN: ContextVar[TraceContext | None] = ContextVar("goondan_agents_span", default=None)
"""The span an `agents` call is made from (the tool-call span); set by the tool-call runner."""
log = structlog.get_logger("goondan.bridge")


class Bridge:
    def __init__(self, send: Send) -> None:
        self._out = send
        self._usage: list[CallPayload] = []
        """Usage reports of the running turn not sent yet (`report`)."""
        self._me = ""
        self._address = ""
        self._source: Source | None = None
        self._responses: dict[str, asyncio.Future[AgentEvent]] = {}
        self._calls: dict[str, asyncio.Future[CallResultPayload]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.current: AgentEvent | None = None
        """The event whose turn is running: its trace, auth and call chain travel on."""
        self.inbox: Inbox | None = None
        self.on_reply: Callable[[], None] = lambda: None
        """Called after an async reply was stored (the child wakes an idle runtime)."""
        self._ahead: Ahead | None = None
        self._permit_ids = itertools.count()
        """Permit call ids: unique in this process, with no uuid per model call."""

    def bind(self, me: str, address: str, source: Source) -> None:
        """`me` is this process's id (frames' `from`); `address` (no generation) is where
        responses come back, so a reply still finds a replacement of this process."""
        self._me = me
        self._address = address
        self._source = source

    def deliver_response(self, event: AgentEvent) -> bool:
        correlation_id = event.in_reply_to or ""
        fut = self._responses.pop(correlation_id, None)
        if fut is not None and not fut.done():
            fut.set_result(event)
            return True
        if self.inbox is not None and self.inbox.expected(correlation_id):
            # an async request of an earlier process of this instance: keep its reply
            self._store(correlation_id, event, None)
            return True
        return False

    def deliver_call_result(self, result: CallResultPayload) -> bool:
        fut = self._calls.pop(result.call_id, None)
        if fut is None or fut.done():
            return False
        fut.set_result(result)
        return True

    def _event(
        self, target: str, input: str, instance_key: str | None, *, waits: bool, **kw: Any
    ) -> tuple[AgentEvent, str]:
        """`waits`: this turn blocks on the answer (a sync request), so it joins the call
        chain; sends and async requests carry no chain (nobody is blocked on them)."""
        assert self._source is not None, "bind() first"
        key = instance_key or self._source.instance_key or target
        current = self.current
        span = CURRENT_SPAN.get()
        trace = span if span is not None else current.trace.child() if current else None
        metadata: JsonObject = dict(kw.pop("metadata", None) or {})
        metadata.pop(CALL_CHAIN, None)
        if waits:
            chain = current.metadata.get(CALL_CHAIN) if current is not None else None
            metadata[CALL_CHAIN] = [
                *(chain if isinstance(chain, list) else []),
                f"{self._source.name}@{self._source.instance_key}",
            ]
        event = new_event(
            input=input,
            instance_key=key,
            source=self._source,
            trace=trace,
            metadata=metadata,
            auth=current.auth if current is not None else None,
            **kw,
        )
        return event, str(agent_address(target, key))

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str = "agent.request",
        timeout_ms: int = 60_000,
        async_: bool = False,
        metadata: JsonObject | None = None,
    ) -> JsonObject:
        correlation_id = uuid.uuid4().hex
        reply_to = ReplyTo(target=self._address, correlation_id=correlation_id)
        event, to = self._event(
            target,
            input,
            instance_key,
            waits=not async_,
            type=event_type,
            reply_to=reply_to,
            metadata=metadata,
        )
        fut: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
        self._responses[correlation_id] = fut
        if async_ and self.inbox is not None:
            self.inbox.expect(correlation_id, to)
        await self._send(Event(from_=self._me, to=to, payload=event))
        result: JsonObject = {
            "target": target,
            "instanceKey": event.instance_key,
            "eventId": event.id,
            "correlationId": correlation_id,
            "accepted": True,
            "async": async_,
            "response": None,
        }
        if async_:
            self._spawn_task(self._await_async(correlation_id, fut, target, timeout_ms))
            return result
        response = await self._wait(correlation_id, fut, target, timeout_ms)
        if response.error is not None:
            error = response.error
            raise ToolFailed(error.message, code=error.code, suggestion=error.suggestion)
        result["response"] = response.input
        return result

    async def _wait(
        self, correlation_id: str, fut: asyncio.Future[AgentEvent], target: str, timeout_ms: int
    ) -> AgentEvent:
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await fut
        except TimeoutError:
            raise ToolFailed(
                f"{target} did not answer within {timeout_ms} ms",
                code=ErrorCode.E_AGENT_TIMEOUT,
                suggestion="raise timeoutMs, use async: true, or send without waiting",
            ) from None
        finally:
            self._responses.pop(correlation_id, None)

    async def _await_async(
        self, correlation_id: str, fut: asyncio.Future[AgentEvent], target: str, timeout_ms: int
    ) -> None:
        try:
            response = await self._wait(correlation_id, fut, target, timeout_ms)
        except ToolFailed as exc:
            self._store(correlation_id, None, {"code": exc.code, "message": exc.message})
            return
        self._store(correlation_id, response, None)

    def _store(self, correlation_id: str, response: AgentEvent | None, error: Any) -> None:
        if self.inbox is None:
            log.warning("async_reply_dropped", correlation_id=correlation_id, reason="no inbox")
            return
        try:
            self.inbox.store(correlation_id, response, error)
        except OSError as exc:
            log.error("async_reply_not_stored", correlation_id=correlation_id, error=str(exc))
            return
        self.on_reply()

    def _spawn_task(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str = "agent.send",
        metadata: JsonObject | None = None,
    ) -> JsonObject:
        event, to = self._event(
            target, input, instance_key, waits=False, type=event_type, metadata=metadata
        )
        # a call, not a bare frame: "accepted" means the daemon has journaled it
        await self._call(CallOp.SEND, {"to": to, "event": to_builtins(event)})
        return {
            "target": target,
            "instanceKey": event.instance_key,
            "eventId": event.id,
            "accepted": True,
        }

    async def _call(self, op: CallOp, args: JsonObject) -> JsonObject:
        call_id = uuid.uuid4().hex
        fut: asyncio.Future[CallResultPayload] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = fut
        payload = CallPayload(call_id=call_id, op=op, args=args)
        await self._send(Call(from_=self._me, to=ORCHESTRATOR, payload=payload))
        try:
            async with asyncio.timeout(30):
                result = await fut
        except TimeoutError:
            raise ToolFailed(
                f"the orchestrator did not answer {op} within 30 s", code=ErrorCode.E_AGENT_TIMEOUT
            ) from None
        finally:
            self._calls.pop(call_id, None)
        if not result.ok:
            error = result.error or ErrorInfo(code=ErrorCode.E_TOOL, message=f"{op} failed")
            raise ToolFailed(error.message, code=error.code, suggestion=error.suggestion)
        value: JsonObject = to_builtins(result.result)
        return value

    # -- model calls: permits and usage (orchestrator/calls/permits.py); models/governed.py ----

    def turn_key(self) -> str | None:
        """The event whose turn runs (a turn is counted once per event against budgets)."""
        return self.current.id if self.current is not None else None

    async def permit(self, args: JsonObject) -> CallResultPayload:
        """Ask before a model call (or take the permit asked ahead for it); the answer may
        wait for the Model's shared rate limit, so there is no timeout here (the child dies
        with the orchestrator anyway)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            if ahead.usable(args, time.monotonic()):
                try:
                    return await ahead.future
                finally:
                    self._calls.pop(ahead.call_id, None)
            await self._give_back(ahead)
        call_id, fut = self._permit_call()
        try:
            await self._send_permit(call_id, args)
            return await fut
        finally:
            self._calls.pop(call_id, None)

    async def ask_ahead(self, args: JsonObject) -> None:
        """Ask now for the permit of a model call that is sure to come (a turn's first),
        so its round trip overlaps the work before the call (agent_process/permit_ahead.py)."""
        await self.drop_ahead()
        call_id, fut = self._permit_call()
        self._ahead = Ahead.of(args, call_id, fut, time.monotonic())
        # written to the socket now (agent_process/dealer.py), not queued for another thread:
        # the daemon grants it while this turn's set-up runs
        await self._send_permit(call_id, args)

    async def drop_ahead(self) -> None:
        """At a turn's end: a permit asked ahead and not used goes back."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            await self._give_back(ahead)

    async def _give_back(self, ahead: Ahead) -> None:
        if not ahead.future.done():  # still waiting for the rate limit: return it once granted
            ahead.future.add_done_callback(lambda _: self._spawn_task(self._give_back(ahead)))
            return
        self._calls.pop(ahead.call_id, None)
        args = ahead.give_back()
        if args is not None:
            await self.report(args)

    def _permit_call(self) -> tuple[str, asyncio.Future[CallResultPayload]]:
        call_id = f"p{next(self._permit_ids)}"
        fut: asyncio.Future[CallResultPayload] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = fut
        return call_id, fut

    async def _send_permit(self, call_id: str, args: JsonObject) -> None:
        payload = CallPayload(call_id=call_id, op=CallOp.MODEL_PERMIT, args=args)
        await self._send(Call(from_=self._me, to=ORCHESTRATOR, payload=payload))

    async def report(self, args: JsonObject, *, last: bool = False) -> None:
        """Tell the orchestrator what a model call used; no answer comes back.

        The report of a turn's `last` model call (no tool calls follow: the reply is next) is
        held until this bridge's next frame or the turn's end (`flush_usage`, right after the
        reply): every frame that could depend on it still comes after it, but the reply does
        not wait behind a frame of its own (it costs one send)."""
        payload = CallPayload(call_id=uuid.uuid4().hex, op=CallOp.MODEL_USAGE, args=args)
        self._usage.append(payload)
        if not last or self.current is None:
            await self.flush_usage()

    async def flush_usage(self) -> None:
        """Send the usage reports held back by `report`."""
        held, self._usage = self._usage, []
        for payload in held:
            await self._out(Call(from_=self._me, to=ORCHESTRATOR, payload=payload))

    async def _send(self, msg: Message) -> None:
        if self._usage:
            await self.flush_usage()
        await self._out(msg)

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> JsonObject:
        return await self._call(
            CallOp.SPAWN, {"target": target, "instanceKey": instance_key, "cwd": cwd}
        )

    async def restart(self, reason: str) -> JsonObject:
        """`self-restart`: the orchestrator re-reads the bundle and restarts the swarm's agents
        once their current turns complete (this one included)."""
        return await self._call(CallOp.RESTART, {"reason": reason})

    async def list(self, *, include_all: bool = False) -> JsonObject:
        return await self._call(CallOp.LIST, {"includeAll": include_all})

    async def catalog(self) -> JsonObject:
        return await self._call(CallOp.CATALOG, {})
