"""The `agents` bridge inside a child: inter-agent calls as frames through the orchestrator.

`request` sends an event with `replyTo` and waits for the response routed back by its
correlation id (or the orchestrator's coded error, e.g. E_AGENT_CRASHED); `send` does not
wait; `spawn`/`list`/`catalog` are `call` frames answered by `call_result`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bundles.sdk import JsonObject, ToolFailed
from protocol.codec import to_builtins
from protocol.errors import ErrorCode
from protocol.events import AgentEvent, ReplyTo, Source, new_event
from protocol.ids import ORCHESTRATOR, agent_address
from protocol.messages import Call, CallOp, CallPayload, CallResultPayload, Event, Message

Send = Callable[[Message], Awaitable[None]]


class Bridge:
    def __init__(self, send: Send) -> None:
        self._send = send
        self._me = ""
        self._address = ""
        self._source: Source | None = None
        self._responses: dict[str, asyncio.Future[AgentEvent]] = {}
        self._calls: dict[str, asyncio.Future[CallResultPayload]] = {}

    def bind(self, me: str, address: str, source: Source) -> None:
        """`me` is this process's id (frames' `from`); `address` (no generation) is where
        responses come back, so a reply still finds a replacement of this process."""
        self._me = me
        self._address = address
        self._source = source

    def deliver_response(self, event: AgentEvent) -> bool:
        fut = self._responses.pop(event.in_reply_to or "", None)
        if fut is None or fut.done():
            return False
        fut.set_result(event)
        return True

    def deliver_call_result(self, result: CallResultPayload) -> bool:
        fut = self._calls.pop(result.call_id, None)
        if fut is None or fut.done():
            return False
        fut.set_result(result)
        return True

    def _event(self, target: str, input: str, instance_key: str | None, **kw: Any) -> AgentEvent:
        assert self._source is not None, "bind() first"
        key = instance_key or self._source.instance_key or target
        return new_event(input=input, instance_key=key, source=self._source, **kw)

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
        event = self._event(
            target,
            input,
            instance_key,
            type=event_type,
            reply_to=ReplyTo(target=self._address, correlation_id=correlation_id),
            metadata=metadata,
        )
        fut: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
        self._responses[correlation_id] = fut
        to = str(agent_address(target, event.instance_key))
        await self._send(Event(from_=self._me, to=to, payload=event))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                response = await fut
        except TimeoutError:
            self._responses.pop(correlation_id, None)
            raise ToolFailed(
                f"{target} did not answer within {timeout_ms} ms",
                code=ErrorCode.E_AGENT_TIMEOUT,
                suggestion="raise timeoutMs or send without waiting",
            ) from None
        if response.error is not None:
            raise ToolFailed(response.error.message, code=response.error.code)
        return {"target": target, "instanceKey": event.instance_key, "response": response.input}

    async def send(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str = "agent.send",
        metadata: JsonObject | None = None,
    ) -> JsonObject:
        event = self._event(target, input, instance_key, type=event_type, metadata=metadata)
        to = str(agent_address(target, event.instance_key))
        await self._send(Event(from_=self._me, to=to, payload=event))
        return {"target": target, "instanceKey": event.instance_key, "eventId": event.id}

    async def _call(self, op: CallOp, args: JsonObject) -> JsonObject:
        call_id = uuid.uuid4().hex
        fut: asyncio.Future[CallResultPayload] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = fut
        payload = CallPayload(call_id=call_id, op=op, args=args)
        await self._send(Call(from_=self._me, to=ORCHESTRATOR, payload=payload))
        result = await fut
        if not result.ok:
            error = result.error
            raise ToolFailed(
                error.message if error else f"{op} failed",
                code=error.code if error else ErrorCode.E_TOOL,
            )
        return {"result": to_builtins(result.result)}

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> JsonObject:
        return await self._call(CallOp.SPAWN, {"agent": target, "instanceKey": instance_key})

    async def list(self, *, include_all: bool = False) -> JsonObject:
        return await self._call(CallOp.LIST, {"includeAll": include_all})

    async def catalog(self) -> JsonObject:
        return await self._call(CallOp.CATALOG, {})
