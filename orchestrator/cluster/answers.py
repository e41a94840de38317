"""Answers to deferred calls across nodes (ARCHITECTURE.md §15).

`goondan calls resolve|approve|deny`, Studio's buttons and a connector's `/rpc` may reach any
node; the call's suspended turn runs on the node that leases the instance's partition. A node
that does not run it sends the answer (`Forward`) as a request to the lease holder
(`node_requests.py`, `answer`); that node answers it as if it had been asked
itself and replies with what its index returned (the resumed turn's reply when the client
waits for it) or the coded error. A holder that is handing the partition over says `moved`,
and a node that died has no responder: the asker reads the lease again and retries until
another node holds it, at most `patience` seconds, then says the call is still pending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.js.errors
import structlog

from orchestrator.calls.deferred import DeferredCallError
from orchestrator.calls.deferred_remote import Forward
from orchestrator.cluster.names import partition_of
from orchestrator.cluster.node_requests import NodeRequests
from protocol.errors import ErrorCode
from protocol.events import AgentEvent
from protocol.ids import Address, agent_address

log = structlog.get_logger("goondan.cluster.answers")
WHAT = "answer"
RETRY_EVERY = 0.25
ANSWER_MARGIN = 10.0
"""How much longer than the client's own wait the asker waits for the holder's reply."""


class AnswerReply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    event: AgentEvent | None = None
    result: Any = None
    code: str | None = None
    message: str = ""
    moved: bool = False


Handle = Callable[[Forward], Awaitable[Any]]
"""Answers a call forwarded here as if this node had been asked (`DeferredIndex.handle`)."""
_encode = msgspec.json.Encoder().encode
_decode_forward = msgspec.json.Decoder(Forward).decode
_decode_reply = msgspec.json.Decoder(AnswerReply).decode


class Answers:
    def __init__(
        self,
        requests: NodeRequests,
        partitions: int,
        runs: Callable[[Address], bool],
        patience: float,
    ) -> None:
        self.requests = requests
        self.nats = requests.nats
        self.partitions = partitions
        self.runs = runs
        """Whether this node runs an instance now (holds its partition, not handing it over)."""
        self.patience = patience

    # -- the node that runs the call -------------------------------------------------------

    async def serve(self, handle: Handle) -> None:
        """Answer what other nodes forward with `handle` (the deferred-call index's)."""

        async def answer(data: bytes) -> bytes:
            return _encode(await self._reply_to(data, handle))

        await self.requests.serve(WHAT, answer, audit=True)

    async def _reply_to(self, data: bytes, handle: Handle) -> AnswerReply:
        try:
            forward = _decode_forward(data)
        except msgspec.DecodeError as exc:
            log.warning("answer_unreadable", error=str(exc))
            return AnswerReply(code=ErrorCode.E_CONTROL_BAD_REQUEST, message=f"unreadable: {exc}")
        if not self.runs(_target(forward)):
            return AnswerReply(moved=True)
        log.info("answer_forwarded_here", call_id=forward.call_id, via=forward.via)
        try:
            result = await handle(forward)
        except DeferredCallError as exc:
            return AnswerReply(code=exc.code, message=exc.message)
        if isinstance(result, AgentEvent):
            return AnswerReply(event=result)
        return AnswerReply(result=result)

    # -- a node asked for a call it does not run ---------------------------------------------

    async def forward(self, forward: Forward) -> Any:
        target = _target(forward)
        p = partition_of(target.name, target.instance_key, self.partitions)
        data = _encode(forward)
        deadline = time.monotonic() + self.patience
        while True:
            holder = await self._holder(p)
            if holder is not None:
                reply = await self._ask(holder, data, forward)
                if reply is not None and not reply.moved:
                    return _result(reply)
            if time.monotonic() >= deadline:
                raise DeferredCallError(
                    ErrorCode.E_CLUSTER_UNAVAILABLE,
                    f"no node runs {target} (partition {p}) now: call {forward.call_id} is "
                    "still pending; answer it again once `goondan cluster status` shows the "
                    "partition owned",
                )
            await asyncio.sleep(RETRY_EVERY)

    async def _ask(self, holder: str, data: bytes, forward: Forward) -> AnswerReply | None:
        """The holder's reply; None when it is gone (no responder)."""
        wait_s = forward.wait_s + ANSWER_MARGIN
        try:
            raw = await self.requests.ask(holder, WHAT, data, wait_s)
        except TimeoutError:
            raise DeferredCallError(
                ErrorCode.E_AGENT_TIMEOUT,
                f"node {holder} took the answer to call {forward.call_id} but did not reply "
                f"within {wait_s:.0f} s (see `goondan calls list`)",
            ) from None
        if raw is None:
            return None
        try:
            return _decode_reply(raw)
        except msgspec.DecodeError:
            raise DeferredCallError(
                ErrorCode.E_CLUSTER_UNAVAILABLE, f"node {holder} sent an unreadable reply"
            ) from None

    async def _holder(self, partition: int) -> str | None:
        try:
            entry = await self.nats.leases.get(self.nats.names.lease_key(partition))
        except nats.js.errors.KeyNotFoundError:
            return None
        return (entry.value or b"").decode() or None


def _target(forward: Forward) -> Address:
    return agent_address(forward.agent, forward.instance_key)


def _result(reply: AnswerReply) -> Any:
    if reply.code is not None:
        try:
            code = ErrorCode(reply.code)
        except ValueError:
            code = ErrorCode.E_CLUSTER_UNAVAILABLE
        raise DeferredCallError(code, reply.message)
    return reply.event if reply.event is not None else reply.result
