"""What the `api` connector's three protocols (OpenAI, A2A, MCP) share: handing an input to
an agent instance and getting its reply as pieces, answering a client-side call, and the HTTP
status of a coded error.

`Edge.pieces` is the streaming seam: an async iterator of the pieces of one agent reply. Each
protocol renders pieces as it streams (OpenAI chunks, A2A artifact updates, MCP progress) and
ends with the last piece's `Done`. Until deltas travel from the model through the daemon
(streaming), the reply arrives whole: one piece with the whole text. Wiring real deltas in is
this one function.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bundles.sdk import ConnectorContext, ConnectorReply, load_sibling

MESSAGE_EVENT = "message"
ANSWER_EVENT = "deferred.answer"
"""The event that carries a client's JSON-RPC response to a client-side call (ARCHITECTURE.md
§10); the orchestrator resolves the call and answers with the resumed turn's reply."""
STATUS_OF = {
    "E_AGENT_NOT_FOUND": 404, "E_AGENT_NOT_IN_SWARM": 404, "E_CALL_NOT_FOUND": 404,
    "E_CONNECTOR_NO_ROUTE": 403, "E_AGENT_INVALID_INSTANCE_KEY": 400,
    "E_CALL_INVALID_ANSWER": 400, "E_AGENT_CAPACITY": 429, "E_MODEL_RATE_LIMIT": 429,
    "E_AGENT_BUDGET_EXCEEDED": 429,
    "E_AGENT_BACKOFF": 503, "E_AGENT_START_FAILED": 503, "E_AGENT_SHUTTING_DOWN": 503,
    "E_CONNECTOR_CLOSED": 503, "E_AGENT_TIMEOUT": 504,
}  # fmt: skip
"""HTTP status of a coded error from the daemon (anything else: 502, the turn failed)."""
CANCELLED = -32002
"""JSON-RPC code of a client-side call the user cancelled (ARCHITECTURE.md §10)."""


Refusal = load_sibling(__file__, "_httpguard").HttpError
"""A request the edge answers with an error: `status`, `code`, `message`."""


@dataclass(frozen=True, slots=True)
class Done:
    """How a reply ended."""

    event_id: str
    text: str = ""
    usage: Mapping[str, int] = field(default_factory=dict)
    call: Mapping[str, Any] | None = None
    """The JSON-RPC 2.0 request {jsonrpc, id, method, params} of a client-side call the turn
    now waits for: the client runs it and answers with `Edge.answer`."""
    error: Any = None
    """A `Refusal` when the reply is a coded error."""


@dataclass(frozen=True, slots=True)
class Piece:
    text: str = ""
    """The next part of the reply text."""
    done: Done | None = None
    """Set on the last piece only."""


def done_of(reply: ConnectorReply) -> Done:
    if reply.error_code is not None:
        status = STATUS_OF.get(reply.error_code, 502)
        error = Refusal(status, reply.error_code, reply.error_message or reply.error_code)
        return Done(reply.event_id, error=error)
    if reply.deferred is not None:
        return Done(reply.event_id, usage=reply.usage, call=reply.deferred)
    return Done(reply.event_id, reply.text, reply.usage)


def usage_tokens(usage: Mapping[str, int]) -> tuple[int, int]:
    """(input, output) tokens of a turn's usage."""
    return int(usage.get("inputTokens", 0)), int(usage.get("outputTokens", 0))


def result_of(text: str) -> Any:
    """A client's answer to a call: JSON when it parses, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class Edge:
    def __init__(self, ctx: ConnectorContext, timeout: float, agents: frozenset[str]) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self.agents = agents
        """The agents this Connection serves (config.agents, else all of the swarm's)."""

    def check_agent(self, agent: str) -> None:
        if agent not in self.agents:
            known = ", ".join(sorted(self.agents))
            raise Refusal(404, "E_AGENT_NOT_FOUND", f"no agent {agent!r} here; ask one of: {known}")

    def key(self, *candidates: str | None) -> str:
        """The first instance key given, else the Swarm's."""
        for key in candidates:
            if key:
                return key
        return self.ctx.swarm.instance_key

    async def pieces(
        self, agent: str, key: str, text: str, *, idempotency_key: str | None = None
    ) -> AsyncIterator[Piece]:
        """The reply of `agent`@`key` to `text`, piece by piece (the streaming seam)."""
        reply = await self._emit(MESSAGE_EVENT, {}, text, agent, key, idempotency_key)
        done = done_of(reply)
        yield Piece(text=done.text, done=done)

    async def answer(
        self, call_id: str, *, result: Any = None, error: Mapping[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        """Answer the client-side call `call_id`; the pieces of the resumed turn's reply."""
        rpc: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id}
        rpc.update({"error": dict(error)} if error is not None else {"result": result})
        reply = await self._emit(ANSWER_EVENT, {"rpc": rpc}, "", None, None, None)
        done = done_of(reply)
        yield Piece(text=done.text, done=done)

    async def cancel(self, call_id: str, why: str) -> None:
        """Answer a call as cancelled by the user, without waiting for the resumed turn."""
        rpc = {"jsonrpc": "2.0", "id": call_id, "error": {"code": CANCELLED, "message": why}}
        await self.ctx.emit(ANSWER_EVENT, {"rpc": rpc}, "", reply=False)

    async def _emit(
        self,
        event: str,
        properties: dict[str, Any],
        text: str,
        agent: str | None,
        key: str | None,
        idempotency_key: str | None,
    ) -> ConnectorReply:
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self.ctx.emit(event, properties, text, reply=True,
                                            idempotency_key=idempotency_key, agent=agent,
                                            instance_key=key)  # fmt: skip
        except TimeoutError:
            raise Refusal(504, "E_AGENT_TIMEOUT", f"no reply within {self.timeout:g} s") from None
        assert reply is not None  # emit(reply=True) always answers
        return reply


async def whole(pieces: AsyncIterator[Piece]) -> Done:
    """The last piece's Done, with the text of every piece."""
    texts = []
    async for piece in pieces:
        texts.append(piece.text)
        if piece.done is not None:
            done = piece.done
            if done.error is None and done.call is None:
                return Done(done.event_id, "".join(texts), done.usage)
            return done
    raise Refusal(502, "E_AGENT_TURN_FAILED", "the reply ended without its end")
