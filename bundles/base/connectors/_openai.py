"""The OpenAI-compatible part of the `api` connector: `GET /v1/models` and
`POST /v1/chat/completions`, so any OpenAI client (the official SDKs, Open WebUI, LibreChat,
IDEs) can talk to a swarm.

- `model` is the agent. The instance is the request's `user`, else the `X-Goondan-Instance`
  header, else the Swarm's instanceKey, in the token's namespace (`_edge.Edge.key`); an
  `Idempotency-Key` is the token's own. The conversation lives in the agent: only the last
  user message is its input; earlier messages are the client's copy and are not replayed.

- `stream: true` answers with server-sent `chat.completion.chunk`s as the model writes, one
  per delta (`_edge.Edge.pieces`), ending with `finish_reason: "stop"` and `data: [DONE]`
  (`stream_options.include_usage` adds a usage chunk). Text a step wrote before a tool call
  streams too, as a paragraph of its own. The API has no place for a server-side tool's
  progress, so a tool call that runs in the agent is a chunk with an empty `delta` and the
  extension field `goondan: {tool: {name, callId, status}}` (`status` started, then ok, error
  or pending): clients that do not know it see nothing. `usage` comes from the turn's
  token counts. A client that goes away mid-stream leaves the turn to finish and be recorded.
- A client-side call the turn waits for (ARCHITECTURE.md §10) ends the completion with one
  tool call (`finish_reason: "tool_calls"`, id = the call id, name = its JSON-RPC method,
  arguments = its params); the client answers it in its next request with a message
  `{role: tool, tool_call_id, content}` (JSON, or text), and that request's completion is the
  resumed turn's reply, streamed as it is written when both requests stream.
- Errors use OpenAI's shape `{error: {message, type, param, code}}` with the HTTP status of the
  coded error (`_edge.STATUS_OF`: 404 unknown model, 429 over capacity, 503 in backoff, ...).

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, NamedTuple

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bundles.sdk import load_sibling

edge = load_sibling(__file__, "_edge")
EventStream = load_sibling(__file__, "_http").EventStream
Refusal = edge.Refusal
INSTANCE_HEADER = "x-goondan-instance"
TYPE_OF = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ChatRequest(msgspec.Struct):
    model: str
    messages: list[ChatMessage]
    stream: bool = False
    user: str | None = None
    stream_options: StreamOptions | None = None


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    kind = TYPE_OF.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def refuse(exc: Any) -> Response:
    return JSONResponse(error_body(exc.status, exc.code, exc.message), exc.status)


def text_of(message: ChatMessage) -> str:
    """A message's text: its string content, or its text parts joined."""
    content = message.content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return content or ""


def parse(body: bytes) -> ChatRequest:
    try:
        request = msgspec.json.decode(body, type=ChatRequest)
    except msgspec.DecodeError as exc:
        raise Refusal(400, "E_API_BAD_REQUEST", f"not a chat completion request: {exc}") from None
    if not request.messages:
        raise Refusal(400, "E_API_BAD_REQUEST", "`messages` is empty: send at least one")
    return request


def tool_answers(request: ChatRequest) -> list[ChatMessage]:
    """The trailing `tool` messages: answers to the client-side calls of the last turn."""
    answers: list[ChatMessage] = []
    for message in reversed(request.messages):
        if message.role != "tool":
            break
        if not message.tool_call_id:
            raise Refusal(400, "E_API_BAD_REQUEST", "a `tool` message needs its tool_call_id")
        answers.insert(0, message)
    return answers


def user_input(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return text_of(message)
    raise Refusal(400, "E_API_BAD_REQUEST", "no `user` message: the last one is the input")


def usage_of(done: Any) -> dict[str, int]:
    prompt, completion = edge.usage_tokens(done.usage)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def tool_call(call: Any) -> dict[str, Any]:
    arguments = json.dumps(call.get("params", {}))
    return {"id": str(call["id"]), "type": "function",
            "function": {"name": str(call.get("method", "")), "arguments": arguments}}  # fmt: skip


class Completions:
    def __init__(self, edge_: Any) -> None:
        self.edge = edge_
        self._ids = CompletionIds()

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/chat/completions", self.complete, methods=["POST"]),
        ]

    async def models(self, _: Request) -> Response:
        agents = sorted(self.edge.agents)
        data = [{"id": a, "object": "model", "created": 0, "owned_by": self.edge.ctx.swarm.name}
                for a in agents]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    async def complete(self, request: Request) -> Response:
        try:
            chat = parse(await request.body())
            self.edge.check_agent(chat.model)
            pieces = self._pieces(chat, request.headers)
            first = await anext(pieces)
            if first.done is not None and first.done.error is not None:
                raise first.done.error
        except Refusal as exc:
            self.edge.ctx.logger.info("api_refused", status=exc.status, code=exc.code)
            return refuse(exc)
        if chat.stream:
            include_usage = chat.stream_options is not None and chat.stream_options.include_usage
            chunks = self._chunks(chat.model, first, pieces, include_usage)
            stream: Response = EventStream(chunks, media_type="text/event-stream",
                                           headers={"cache-control": "no-cache"})  # fmt: skip
            return stream
        done = await edge.whole(_chain(first, pieces))
        return JSONResponse(self._completion(chat.model, done))

    def _pieces(self, chat: ChatRequest, headers: Any) -> AsyncGenerator[Any]:
        answers = tool_answers(chat)
        client = headers.get(edge.CLIENT_HEADER, "")
        key = self.edge.key(client, chat.user, headers.get(INSTANCE_HEADER))
        if answers:  # only the last answer's reply is this completion
            return _answer_all(self.edge, answers, chat.stream, For(client, chat.model, key))
        idempotency = self.edge.idempotency(client, headers.get("idempotency-key"))
        text = user_input(chat)
        return self.edge.pieces(chat.model, key, text, idempotency_key=idempotency,  # type: ignore[no-any-return]
                                stream=chat.stream)  # fmt: skip

    def _completion(self, model: str, done: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": done.text}
        finish = "stop"
        if done.call is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [tool_call(done.call)]}
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{done.event_id}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "usage": usage_of(done),
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
        }  # fmt: skip

    async def _chunks(
        self, model: str, first: Any, pieces: AsyncGenerator[Any], include_usage: bool
    ) -> AsyncIterator[bytes]:
        head = {"id": f"chatcmpl-{self._ids.next()}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model}  # fmt: skip
        chunk = ChunkTemplate(head)

        # one write per piece (the role chunk rides with the first, [DONE] with the end): each
        # write is a send on the socket and a wake-up of the client
        out = [chunk({"role": "assistant", "content": ""})]
        shown = False
        async with aclosing(_chain(first, pieces)) as chain:  # a client gone: stop waiting
            async for piece in chain:
                if piece.tool is not None:  # an extension field: clients that know it show it
                    progress = {"tool": tool_progress(piece.tool)}
                    choices = [{"index": 0, "delta": {}, "finish_reason": None}]
                    out.append(_event({**head, "choices": choices, "goondan": progress}))
                if piece.text and (piece.done is None or piece.done.call is None):
                    out.append(chunk({"content": f"\n\n{piece.text}" if piece.fresh and shown
                                      else piece.text}))  # fmt: skip
                    shown = True
                if piece.done is not None:
                    out.extend(self._end(head, piece.done, include_usage, chunk))
                    break
                if out:
                    yield b"".join(out)
                    out = []
        yield b"".join([*out, b"data: [DONE]\n\n"])

    def _end(self, head: dict[str, Any], done: Any, include_usage: bool, chunk: Any) -> list[bytes]:
        lines: list[bytes] = []
        if done.error is not None:  # after the first piece: the status is sent already
            lines.append(_event(error_body(done.error.status, done.error.code,
                                           done.error.message)))  # fmt: skip
        elif done.call is not None:
            lines.append(chunk({"tool_calls": [{"index": 0, **tool_call(done.call)}]}))
            lines.append(chunk({}, "tool_calls"))
        else:
            lines.append(chunk({}, "stop"))
        if include_usage:
            lines.append(_event({**head, "choices": [], "usage": usage_of(done)}))
        return lines


class CompletionIds:
    """The ids of a server's streamed completions: 32 hex digits as a uuid4's, a random half
    drawn once in this process and a counter, instead of a uuid4 (a getrandom call) before each
    stream's first chunk. Ids name a completion to its client; nothing is looked up by them."""

    __slots__ = ("_count", "_prefix")

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]  # made in the connector process, after any fork
        self._count = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"


class ChunkTemplate:
    """The SSE event of a `chat.completion.chunk` of one completion, from its head encoded
    once: a delta encodes only its `delta` (the bytes are those of the whole dict encoded,
    keys in the same order)."""

    __slots__ = ("_before",)

    def __init__(self, head: dict[str, Any]) -> None:
        self._before = (b"data: " + _encode(head)[:-1]
                        + b',"choices":[{"index":0,"delta":')  # fmt: skip

    def __call__(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        if finish is None:
            return self._before + _encode(delta) + _NO_FINISH
        return self._before + _encode(delta) + b',"finish_reason":' + _encode(finish) + _END


_encode = msgspec.json.Encoder().encode
_END = b"}]}\n\n"
_NO_FINISH = b',"finish_reason":null' + _END


def tool_progress(tool: Any) -> dict[str, Any]:
    """A tool call of the turn as the `goondan.tool` extension of a chunk."""
    return {"name": tool.name, "callId": tool.call_id, "status": tool.status or "started"}


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + _encode(body) + b"\n\n"


async def _chain(first: Any, rest: AsyncGenerator[Any]) -> AsyncGenerator[Any]:
    try:
        yield first
        if first.done is None:
            async for piece in rest:
                yield piece
    finally:  # closed early (a client gone): so is the wait for the reply
        await rest.aclose()


class For(NamedTuple):
    """Who answers (the token's id) and for which instance its request is (agent, key)."""

    client: str
    agent: str
    key: str


async def _answer_all(
    edge_: Any, answers: list[ChatMessage], stream: bool, by: For
) -> AsyncGenerator[Any]:
    """Answer each call in order; the pieces of the reply to the last answer (streamed when
    the request streams)."""
    for index, message in enumerate(answers):
        result = edge.result_of(text_of(message))
        last = index == len(answers) - 1
        pieces = edge_.answer(message.tool_call_id, result=result, stream=stream and last,
                              client=by.client, agent=by.agent, key=by.key)  # fmt: skip
        if not last:
            done = await edge.whole(pieces)
            if done.error is not None:
                raise done.error
            continue
        async for piece in pieces:
            yield piece
