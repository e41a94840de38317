"""A fake chat API (Telegram Bot API / Slack Web API shaped) on 127.0.0.1 for the tool tests.

A real HTTP server in a thread: tests queue replies per path and read back every request
(method, path, query, headers, body) exactly as the tool sent it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from bundles.sdk import ToolContext, ToolFailed

from .conftest import call


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    hold: bool = False
    """Answer only once `FakeApi.release` is set (for timeouts)."""


def ok(payload: Any, status: int = 200, **headers: str) -> Reply:
    return Reply(
        status, json.dumps(payload).encode(), {"Content-Type": "application/json", **headers}
    )


def raw(body: bytes, status: int = 200, content_type: str = "application/octet-stream") -> Reply:
    return Reply(status, body, {"Content-Type": content_type})


class FakeApi:
    """Replies are queued per path; the last one of a path repeats. Unknown paths get 404."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self._replies: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        self.url = ""
        self.release = threading.Event()

    def on(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._replies[path] = list(replies)

    def reply_for(self, path: str) -> Reply:
        with self._lock:
            queue = self._replies.get(path)
            if not queue:
                return raw(b"not found", 404, "text/plain")
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def _serve(self) -> None:
            url = urlparse(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            api.record(Seen(self.command, url.path, query, headers, body))
            reply = api.reply_for(url.path)
            if reply.hold:
                api.release.wait(10)
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

    return Handler


@contextmanager
def serve() -> Iterator[FakeApi]:
    api = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        api.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


async def run_tool(module: ModuleType, ctx: ToolContext, export: str, args: dict[str, Any]) -> Any:
    """One call of a chat tool's handler, 10 s at most."""
    async with asyncio.timeout(10):
        return await call(module, export, ctx, args)


async def tool_failure(
    module: ModuleType, ctx: ToolContext, export: str, args: dict[str, Any], *, token: str
) -> ToolFailed:
    """The ToolFailed of one call; the bot token never appears in its message."""
    with pytest.raises(ToolFailed) as info:
        await run_tool(module, ctx, export, args)
    assert token not in info.value.message
    return info.value
