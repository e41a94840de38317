"""A tiny OpenAI/Anthropic-compatible HTTP server on 127.0.0.1 that records what it receives.

Each POST gets the next scripted reply (status, JSON body); the request's path, headers and JSON
body are kept in `requests`. HTTP/1.1 keep-alive is supported because the SDKs reuse connections.
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
