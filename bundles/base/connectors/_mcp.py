"""The MCP part of the `api` connector: the swarm as an MCP server (Streamable HTTP at `/mcp`,
the `mcp` SDK's session manager), so Claude Code, Cursor or any MCP client can call an agent
as a tool.

- Each agent served is a tool `ask_<agent>` with `{input, instanceKey?}` (instance: the
  argument, else the `X-Goondan-Instance` header, else the Swarm's instanceKey, in the token's
  namespace: `_edge.Edge.key`); the agent's reply is the tool result, a coded error an
  `isError` result.

- While the agent works the client gets progress notifications (when it asked for them with
  a progress token; only then does the turn stream, `_edge.Edge.pieces`): one when the input
  is handed over, then one per delta, its `message` the model's text as it is written (a
  step's text after an earlier step's starts with a blank line) or `<tool> started` /
  `<tool> finished: <status>` for a tool call in the agent, and one with what the deltas did
  not carry, if any. The tool result is the whole reply.
- A client-side call the turn waits for (ARCHITECTURE.md §10) is the tool result: its
  JSON-RPC request in `structuredContent.pendingCall`, and text saying how to answer it. The
  client runs it and calls the tool `answer_call` with `{id, result}` (or `{id, error: {code,
  message}}`); that call's result is the resumed turn's reply.

A session (`Mcp-Session-Id`) is used only with the token that opened it (`SessionOwners`).

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).

"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bundles.sdk import load_sibling

edge = load_sibling(__file__, "_edge")
PREFIX = "ask_"
ANSWER_TOOL = "answer_call"
INSTANCE_HEADER = "x-goondan-instance"
SESSION_HEADER = "mcp-session-id"
MAX_SESSIONS = 100_000

ANSWER_SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string", "description": "The pending call's id."},
        "result": {"description": "What running the call gave (any JSON)."},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
            "description": "Instead of result: -32001 denied, -32002 cancelled by the user.",
        },
    },
}


def ask_schema(agent: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["input"],
        "properties": {
            "input": {"type": "string", "description": f"What to say to {agent}."},
            "instanceKey": {"type": "string",
                            "description": "The conversation (default: the swarm's)."},
        },
    }  # fmt: skip


def _text(text: str, *, error: bool = False, data: Any = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=data, is_error=error)  # fmt: skip


class McpEdge:
    def __init__(self, edge_: Any) -> None:
        self.edge = edge_
        swarm = edge_.ctx.swarm
        self.server: Server[Any] = Server(
            f"goondan-{swarm.name}",
            version="1.0.0",
            instructions=f"The agents of the goondan swarm {swarm.name}: call ask_<agent>.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            max_request_body_size=int(edge_.ctx.config.get("maxBodyBytes", 1 << 20)),
        )

    def routes(self) -> list[BaseRoute]:
        app = SessionOwners(StreamableHTTPASGIApp(self.manager))
        return [Route("/mcp", app, methods=["GET", "POST", "DELETE"])]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def _list_tools(self, _ctx: Any, _params: Any) -> types.ListToolsResult:
        tools = [
            types.Tool(name=f"{PREFIX}{agent.name}", input_schema=ask_schema(agent.name),
                       description=agent.description or f"Ask the agent {agent.name}.")
            for agent in self.edge.ctx.swarm.agents
            if agent.name in self.edge.agents
        ]  # fmt: skip
        tools.append(types.Tool(name=ANSWER_TOOL, input_schema=ANSWER_SCHEMA,
                                description="Answer a client-side call an agent waits for; "
                                "the result is the agent's reply."))  # fmt: skip
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        try:
            if params.name == ANSWER_TOOL:
                return await self._answer(ctx, args)
            if not params.name.startswith(PREFIX):
                raise edge.Refusal(404, "E_AGENT_NOT_FOUND", f"no tool {params.name!r}")
            agent = params.name[len(PREFIX) :]
            self.edge.check_agent(agent)
            text = args.get("input")
            if not isinstance(text, str) or not text.strip():
                raise edge.Refusal(400, "E_API_BAD_REQUEST", "`input` must be a non-empty string")
            headers = getattr(getattr(ctx, "request", None), "headers", None) or {}
            key = self.edge.key(headers.get(edge.CLIENT_HEADER, ""), args.get("instanceKey"),
                                headers.get(INSTANCE_HEADER))  # fmt: skip
            await _progress(ctx, 0, f"sent to {agent}@{key}")
            stream = _wants_progress(ctx)
            return await self._result(ctx, self.edge.pieces(agent, str(key), text, stream=stream))
        except edge.Refusal as exc:
            return _text(f"{exc.code}: {exc.message}", error=True, data={"code": exc.code})

    async def _answer(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        call_id = args.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise edge.Refusal(400, "E_API_BAD_REQUEST", "`id` must be the pending call's id")
        error = args.get("error")
        headers = getattr(getattr(ctx, "request", None), "headers", None) or {}
        pieces = self.edge.answer(call_id, result=args.get("result"),
                                  error=error if isinstance(error, dict) else None,
                                  stream=_wants_progress(ctx),
                                  client=headers.get(edge.CLIENT_HEADER, ""))  # fmt: skip
        await _progress(ctx, 0, f"answered call {call_id}")
        return await self._result(ctx, pieces)

    async def _result(self, ctx: Any, pieces: Any) -> types.CallToolResult:
        count = 0
        shown = False
        async for piece in pieces:
            message = _message(piece, shown)
            if message:
                count += 1
                shown = shown or piece.tool is None
                await _progress(ctx, count, message)
            done = piece.done
            if done is None:
                continue
            if done.error is not None:
                return _text(f"{done.error.code}: {done.error.message}", error=True,
                             data={"code": done.error.code})  # fmt: skip
            if done.call is not None:
                call = dict(done.call)
                how = (f"The agent waits for a client-side call: {call.get('method')} "
                       f"{json.dumps(call.get('params'))}. Run it, then call {ANSWER_TOOL} "
                       f"with id {call.get('id')!r} and its result.")  # fmt: skip
                return _text(how, data={"pendingCall": call})
            return _text(done.text, data={"reply": done.text, "eventId": done.event_id})
        raise edge.Refusal(502, "E_AGENT_TURN_FAILED", "the reply ended without its end")


class SessionOwners:
    """ASGI wrapper of the MCP app: a session (`Mcp-Session-Id`) is used only with the token
    that opened it; with another it is not found (404), as the session of a stranger. A client
    that learned a session id could otherwise send in it, listen to it, or end it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.owners: OrderedDict[str, str] = OrderedDict()
        """Session id -> the token id that opened it (the oldest forgotten past
        MAX_SESSIONS)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        client = headers.get(edge.CLIENT_HEADER, "")
        session = headers.get(SESSION_HEADER)
        if session is not None and self.owners.get(session, client) != client:
            body = {"jsonrpc": "2.0", "id": None,
                    "error": {"code": -32600, "message": "Session not found"}}  # fmt: skip
            await JSONResponse(body, 404)(scope, receive, send)
            return
        if session is None:
            send = self._recording(send, client)
        await self.app(scope, receive, send)
        if session is not None and scope["method"] == "DELETE":
            self.owners.pop(session, None)

    def _recording(self, send: Send, client: str) -> Send:
        """`send`, noting the session a response opens as `client`'s."""

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == SESSION_HEADER.encode():
                        self.owners[value.decode()] = client
                        if len(self.owners) > MAX_SESSIONS:
                            self.owners.popitem(last=False)
            await send(message)

        return recording


def _message(piece: Any, shown: bool) -> str:
    """A piece as a progress message ("" for none)."""
    if piece.tool is not None:
        tool = piece.tool
        return f"{tool.name} " + ("started" if tool.status is None else f"finished: {tool.status}")
    if piece.done is not None and piece.done.call is not None:
        return ""
    text: str = piece.text
    return f"\n\n{text}" if piece.fresh and shown and text else text


def _wants_progress(ctx: Any) -> bool:
    """The call came with a progress token (`_meta.progressToken`): stream the turn for it."""
    meta = getattr(ctx, "meta", None) or {}
    return meta.get("progress_token") is not None


async def _progress(ctx: Any, progress: float, message: str | None) -> None:
    """A progress notification, when the client asked for them (a no-op otherwise)."""
    await ctx.session.report_progress(progress, None, message)
