"""What the `api` connector's three protocols (OpenAI, A2A, MCP) share: handing an input to
an agent instance and getting its reply as pieces, answering a client-side call, and the HTTP
status of a coded error.

`Edge.pieces` is the streaming seam: an async iterator of the pieces of one agent reply. Each
protocol renders pieces as it streams (OpenAI chunks, A2A artifact and status updates, MCP
progress) and ends with the last piece's `Done`. Asked to stream, it emits with `on_delta`
(ARCHITECTURE.md §4): the model's text arrives as it is written, one piece per delta, and tool
calls as pieces that say a tool started or finished; the last piece holds what the deltas did
not (all of the reply when nothing streamed, the rest of it when deltas were merged away).
Not asked (a client that waits for the whole reply), the reply is one piece.

Text of a step before a tool call is streamed too, though the reply is only the last step's
text: a piece that starts a step's text again is `fresh` (OpenAI and MCP show it as a new
paragraph, A2A replaces its artifact), and so is a last piece whose reply does not continue
what was streamed (deltas lost on the way).

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from bundles.sdk import (
    ConnectorContext,
    ConnectorReply,
    DeltaKind,
    GapWatch,
    StreamDelta,
    load_sibling,
)

MESSAGE_EVENT = "message"
ANSWER_EVENT = "deferred.answer"
"""The event that carries a client's JSON-RPC response to a client-side call (ARCHITECTURE.md
§10); the orchestrator resolves the call and answers with the resumed turn's reply."""
STATUS_OF = {
    "E_AGENT_NOT_FOUND": 404, "E_AGENT_NOT_IN_SWARM": 404, "E_CALL_NOT_FOUND": 404,
    "E_CONNECTOR_NO_ROUTE": 403, "E_AGENT_INVALID_INSTANCE_KEY": 400,
    "E_CALL_INVALID_ANSWER": 400, "E_CALL_FORBIDDEN": 403,
    "E_AGENT_CAPACITY": 429, "E_MODEL_RATE_LIMIT": 429,
    "E_AGENT_BUDGET_EXCEEDED": 429,
    "E_AGENT_BACKOFF": 503, "E_AGENT_START_FAILED": 503, "E_AGENT_SHUTTING_DOWN": 503,
    "E_CONNECTOR_CLOSED": 503, "E_AGENT_TIMEOUT": 504,
}  # fmt: skip
"""HTTP status of a coded error from the daemon (anything else: 502, the turn failed)."""
CANCELLED = -32002
ANSWERED_BY = "answeredBy"
"""Whom the connector authenticated for an answer (protocol.jsonrpc.ANSWERED_BY): the token's
id, which a Connection's `config.approvers` names to let it decide approvals."""
"""JSON-RPC code of a client-side call the user cancelled (ARCHITECTURE.md §10)."""
EAGER = sys.version_info >= (3, 12)
"""Tasks may start eagerly (`started`)."""
T = TypeVar("T")
CLIENT_HEADER = "x-goondan-api-client"
"""The id of the request's bearer token, set by the connector's gate (a client's own header of
that name is dropped): whose instances and idempotency keys a request reaches."""


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
class Tool:
    """A tool call of the turn that started (`status` None) or finished (ok, error, pending)."""

    name: str
    call_id: str
    status: str | None = None


@dataclass(frozen=True, slots=True)
class Piece:
    text: str = ""
    """The next part of the reply text."""
    fresh: bool = False
    """`text` starts over: a new step's text, or the whole reply after deltas were lost."""
    tool: Tool | None = None
    done: Done | None = None
    """Set on the last piece only."""


class Shown:
    """What a stream has shown so far, to turn deltas into pieces and end with the rest."""

    __slots__ = ("parts", "step")

    def __init__(self) -> None:
        self.step: int | None = None
        self.parts: list[str] = []
        """The text of the latest step that wrote some (joined once, at the end)."""

    def piece(self, delta: StreamDelta) -> Piece:
        if delta.kind is DeltaKind.TEXT:
            fresh = delta.step != self.step and self.step is not None
            if delta.step != self.step:
                self.step, self.parts = delta.step, []
            self.parts.append(delta.text)
            return Piece(text=delta.text, fresh=fresh)
        status = None if delta.kind is DeltaKind.TOOL_STARTED else (delta.status or "ok")
        return Piece(tool=Tool(delta.tool or "", delta.tool_call_id or "", status))

    def last(self, done: Done) -> Piece:
        """The last piece: the part of the reply not shown yet."""
        if done.error is not None or done.call is not None:
            return Piece(done=done)
        if self.step is None:
            return Piece(text=done.text, done=done)
        shown = "".join(self.parts)
        if done.text.startswith(shown):
            return Piece(text=done.text[len(shown) :], done=done)
        return Piece(text=done.text, fresh=True, done=done)


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


class Backlog:
    """The deltas a stream has not passed on yet, in order, then None (the reply is in). A
    reader that falls behind (a slow client, whose writes wait) gets the text of a step that
    piled up meanwhile as one delta: the backlog holds at most a few entries per step, never
    one per delta, and the client fewer, larger chunks."""

    __slots__ = ("_gaps", "_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[StreamDelta | list[StreamDelta] | None] = deque()
        """A step's text that waits is a list of its deltas (joined once, when taken)."""
        self._waiter: asyncio.Future[None] | None = None
        """The reader's wait while the backlog is empty (a bare future: an Event keeps a set
        of waiters and a flag for the one reader there is)."""
        self._gaps = GapWatch()
        """After a delta lost on the way, text waits for the reply (Shown.last)."""

    def put(self, delta: StreamDelta | None) -> None:
        if delta is not None and not self._gaps.passes(delta):
            return
        last = self._items[-1] if self._items else None
        if delta is not None and delta.kind is DeltaKind.TEXT:
            if isinstance(last, list) and last[0].step == delta.step:
                last.append(delta)
            else:
                self._items.append([delta])
        else:
            self._items.append(delta)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> StreamDelta | None:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._items.popleft()
        if not isinstance(item, list):
            return item
        if len(item) == 1:
            return item[0]
        return msgspec.structs.replace(item[-1], text="".join(d.text for d in item))


@dataclass(frozen=True)
class _Ask:
    """What the edge emits for a reply: a message to an agent, or an answer to a call."""

    event: str
    properties: dict[str, Any]
    text: str = ""
    agent: str | None = None
    key: str | None = None
    idempotency_key: str | None = None


class Edge:
    def __init__(
        self, ctx: ConnectorContext, timeout: float, agents: frozenset[str], *, shared: bool = False
    ) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self.agents = agents
        """The agents this Connection serves (config.agents, else all of the swarm's)."""
        self.shared = shared
        """config.sharedInstances: every token of the Connection reaches the same instances."""

    def check_agent(self, agent: str) -> None:
        if agent not in self.agents:
            known = ", ".join(sorted(self.agents))
            raise Refusal(404, "E_AGENT_NOT_FOUND", f"no agent {agent!r} here; ask one of: {known}")

    def key(self, client: str, *candidates: str | None) -> str:
        """The instance a client names (the first key given, else the Swarm's instanceKey),
        in the Connection's namespace: `api:<Connection>:<token id>:<name>`, without the token
        id when the Connection shares instances. A client so never reaches an instance of
        another token, nor one the CLI or another connector made."""
        name = next((key for key in candidates if key), self.ctx.swarm.instance_key)
        return f"api:{self.ctx.connection}:{self._owner(client)}{name}"

    def idempotency(self, client: str, key: str | None) -> str | None:
        """A client's `Idempotency-Key` as the token's own: another token's same key is
        another input, with its own reply."""
        return f"{self._owner(client, always=True)}{key}" if key else None

    def _owner(self, client: str, *, always: bool = False) -> str:
        if not client:  # the gate sets it on every request it lets through
            raise Refusal(401, "E_API_UNAUTHORIZED", "send Authorization: Bearer <token>")
        return "" if self.shared and not always else f"{client}:"

    def pieces(
        self,
        agent: str,
        key: str,
        text: str,
        *,
        idempotency_key: str | None = None,
        stream: bool = False,
    ) -> AsyncGenerator[Piece]:
        """The reply of `agent`@`key` to `text`, piece by piece (the streaming seam); with
        `stream`, as the agent works. Closing the iterator early (a client gone) stops the
        wait only: the turn goes on and is recorded."""
        return self._replied(_Ask(MESSAGE_EVENT, {}, text, agent, key, idempotency_key), stream)

    def answer(
        self,
        call_id: str,
        *,
        result: Any = None,
        error: Mapping[str, Any] | None = None,
        stream: bool = False,
        client: str = "",
        agent: str | None = None,
        key: str | None = None,
    ) -> AsyncGenerator[Piece]:
        """Answer the client-side call `call_id`; the pieces of the resumed turn's reply (with
        `stream`, as it works, whether or not the turn's first request streamed). `client`
        (the token's id) is who the daemon records; with `agent` and `key` (the instance the
        client's request addresses) the daemon refuses an answer to another instance's call
        (E_CALL_FORBIDDEN, ARCHITECTURE.md §10)."""
        rpc: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id}
        rpc.update({"error": dict(error)} if error is not None else {"result": result})
        props: dict[str, Any] = {"rpc": rpc, ANSWERED_BY: client} if client else {"rpc": rpc}
        return self._replied(_Ask(ANSWER_EVENT, props, agent=agent, key=key), stream)

    async def _replied(self, ask: _Ask, stream: bool) -> AsyncGenerator[Piece]:
        if not stream:
            reply = await self._emit(ask)
            done = done_of(reply)
            yield Piece(text=done.text, done=done)
            return
        deltas = Backlog()
        emit = started(self._emit(ask, deltas.put))
        emit.add_done_callback(lambda _: deltas.put(None))  # after every delta
        shown = Shown()
        try:
            while (delta := await deltas.get()) is not None:
                yield shown.piece(delta)
            yield shown.last(done_of(await emit))
        finally:
            emit.cancel()

    async def cancel(self, call_id: str, why: str) -> None:
        """Answer a call as cancelled by the user, without waiting for the resumed turn."""
        rpc = {"jsonrpc": "2.0", "id": call_id, "error": {"code": CANCELLED, "message": why}}
        await self.ctx.emit(ANSWER_EVENT, {"rpc": rpc}, "", reply=False)

    async def _emit(
        self, ask: _Ask, on_delta: Callable[[StreamDelta], None] | None = None
    ) -> ConnectorReply:
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self.ctx.emit(ask.event, ask.properties, ask.text, reply=True,
                                            idempotency_key=ask.idempotency_key, agent=ask.agent,
                                            instance_key=ask.key, on_delta=on_delta)  # fmt: skip
        except TimeoutError:
            raise Refusal(504, "E_AGENT_TIMEOUT", f"no reply within {self.timeout:g} s") from None
        assert reply is not None  # emit(reply=True) always answers
        return reply


def started(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task whose first step runs now, up to its first real wait: the event goes out in
    this step, not after a turn of the event loop (and whatever else it runs). Python 3.12+;
    before, an ordinary task."""
    if EAGER:
        loop = asyncio.get_running_loop()  # eager_start needs it given (uvloop's and asyncio's)
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    return asyncio.ensure_future(coro)


async def whole(pieces: AsyncIterator[Piece]) -> Done:
    """The last piece's Done (its text is the whole reply)."""
    async for piece in pieces:
        if piece.done is not None:
            return piece.done
    raise Refusal(502, "E_AGENT_TURN_FAILED", "the reply ended without its end")
