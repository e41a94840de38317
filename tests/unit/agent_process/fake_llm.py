"""A tiny OpenAI/Anthropic-compatible HTTP server on 127.0.0.1 that records what it receives.

Each POST gets the next scripted reply (status, JSON body); the request's path, headers and JSON
body are kept in `requests`. HTTP/1.1 keep-alive is supported because the SDKs reuse connections.
A reply body that is an `Sse` is streamed as server-sent events (chunked, one event per chunk,
flushed one by one), in the providers' real formats: `openai_stream` (chat.completion.chunk
objects, the usage chunk, `[DONE]`) and `anthropic_stream` (message_start ... message_stop).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

HANG = 0
"""A reply status that makes the server never answer."""


@dataclass
class Sse:
    """A streamed reply: each (event name or None, data) is one server-sent event; data that is
    not a str is sent as JSON. `gap` seconds pass between two events; lines end with `eol`;
    `endless`: the body is never ended after the last event (a server that does not hang up);
    `cut`: the server hangs up after the last event without ending the body."""

    events: list[tuple[str | None, Any]]
    gap: float = 0.0
    eol: str = "\n"
    endless: bool = False
    cut: bool = False

    def frames(self) -> list[bytes]:
        out = []
        for name, data in self.events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}{self.eol}" if name else ""
            out.append(f"{head}data: {text}{self.eol}{self.eol}".encode())
        return out


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = 0.0
    """When the request arrived (time.monotonic)."""


@dataclass
class FakeLLMServer:
    replies: list[tuple[int, Any] | tuple[int, Any, dict[str, str]]] = field(default_factory=list)
    """(status, JSON body) or (status, JSON body, extra headers), one per request in order."""
    requests: list[Recorded] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> FakeLLMServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:  # end keep-alive connections and never-answered requests
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                decoded = json.loads(body) if body else None
                self.requests.append(Recorded(method, path, headers, decoded, time.monotonic()))
                reply = self.replies.pop(0) if self.replies else (500, {"error": "none"})
                status, payload, extra = (*reply, {}) if len(reply) == 2 else reply
                if status == HANG:
                    await asyncio.Event().wait()  # never answer: the client's timeout ends it
                if isinstance(payload, Sse):
                    await _stream(writer, status, payload)
                    continue
                data = json.dumps(payload).encode()
                more = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{more}"
                    f"content-length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


async def _stream(writer: asyncio.StreamWriter, status: int, reply: Sse) -> None:
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: text/event-stream\r\n"
        "transfer-encoding: chunked\r\n\r\n".encode()
    )
    for i, frame in enumerate(reply.frames()):
        if i and reply.gap:  # each event on its own; without a gap, all in one burst
            await writer.drain()
            await asyncio.sleep(reply.gap)
        writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
    if reply.endless:
        await writer.drain()
        await asyncio.Event().wait()  # the test's end cancels it
    if reply.cut:
        await writer.drain()
        raise ConnectionResetError("the server hung up mid-body")  # _serve closes the socket
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def openai_stream(
    pieces: list[str],
    tool_calls: list[dict[str, Any]] | None = None,
    usage: tuple[int, int] = (11, 7),
    gap: float = 0.0,
    cached: int = 0,
) -> Sse:
    """A Chat Completions stream: a role chunk, one chunk per text piece, each tool call in
    two fragments (id and name first, the arguments split in two), the finish chunk, the usage
    chunk (`stream_options.include_usage`; `cached` prompt tokens in its details) and
    `[DONE]`."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-test",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk({"content": piece})) for piece in pieces]
    for index, call in enumerate(tool_calls or []):
        raw = call.get("raw") or json.dumps(call["args"])
        first = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": raw[: len(raw) // 2]},
        }
        rest = {"index": index, "function": {"arguments": raw[len(raw) // 2 :]}}  # fmt: skip
        events += [(None, chunk({"tool_calls": [first]})), (None, chunk({"tool_calls": [rest]}))]
    events.append((None, chunk({}, "tool_calls" if tool_calls else "stop")))
    prompt, completion = usage
    counts = {"prompt_tokens": prompt, "completion_tokens": completion,
              "total_tokens": prompt + completion,
              "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip
    events.append((None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                          "model": "gpt-test", "choices": [], "usage": counts}))  # fmt: skip
    events.append((None, "[DONE]"))
    return Sse(events, gap)


def anthropic_stream(
    blocks: list[dict[str, Any]],
    stop: str = "end_turn",
    usage: tuple[int, int] = (13, 5),
    gap: float = 0.0,
) -> Sse:
    """A Messages stream: message_start, a ping, per block content_block_start, its deltas
    (a text block's `pieces` as text_delta, a tool_use block's input as two input_json_delta)
    and content_block_stop, then message_delta (stop reason, output tokens) and
    message_stop."""
    prompt, completion = usage
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1}}}  # fmt: skip
    events: list[tuple[str | None, Any]] = [("message_start", start), ("ping", {"type": "ping"})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in block["pieces"]]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :])]  # fmt: skip
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": opening}))  # fmt: skip
        events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": d}) for d in deltas]  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": completion}}))  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    return Sse(events, gap)


def chat_completion(
    content: str | None = None, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c.get("raw") or json.dumps(c["args"])},
            }
            for c in tool_calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def anthropic_message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 13, "output_tokens": 5},
    }
