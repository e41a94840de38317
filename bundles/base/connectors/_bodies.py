"""The request body and streamed answers of the connectors' HTTP server (`_http.py`):
`BodyGuard` reads a request's whole body within the limits before the app sees it (413 as
soon as Content-Length says too much, or a chunked body passes it; 408 past `readTimeoutMs`),
and `EventStream` sends a streamed answer from the request's own task.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ErrorBody = Callable[[int, str, str], Mapping[str, Any]]
DRAIN_BYTES = 256 * 1024
"""What a refused request may still send before the connection is closed under it."""


class BodyGuard:
    """ASGI middleware: the whole request body within the limits before the app runs."""

    def __init__(self, app: ASGIApp, limits: Any, error_body: ErrorBody) -> None:
        """`limits`: the server's `_http.Limits`."""
        self.app = app
        self.limits = limits
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        length = Headers(scope=scope).get("content-length")
        if length is not None and not length.isdigit():
            await self._refuse(send, 400, limits.code("BAD_REQUEST"), "bad Content-Length")
            return
        try:
            async with asyncio.timeout(limits.read_timeout):
                if length is not None and int(length) > limits.max_body_bytes:
                    raise _BodyTooLarge
                body = await self._read(receive)
        except TimeoutError:
            message = f"the request body was not sent within {limits.read_timeout:g} s"
            await self._refuse(send, 408, limits.code("TIMEOUT"), message)
            return
        except _BodyTooLarge:
            await self._drain(receive)
            message = f"the body is limited to {limits.max_body_bytes} bytes"
            await self._refuse(send, 413, limits.code("TOO_LARGE"), message)
            return
        if body is None:
            return  # the client went away
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                raise _BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _drain(self, receive: Receive) -> None:
        """Read a little of what the client still sends before answering and closing: closing
        with unread data resets the connection, and the client would never see the 413."""
        left = DRAIN_BYTES
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.limits.read_timeout):
                while left > 0:
                    message = await receive()
                    left -= len(message.get("body", b""))
                    if message["type"] == "http.disconnect" or not message.get("more_body"):
                        return

    async def _refuse(self, send: Send, status: int, code: str, message: str) -> None:
        body = json.dumps(self.error_body(status, code, message)).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                   (b"content-length", str(len(body)).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class EventStream(StreamingResponse):
    """A streamed answer sent from the request's own task: Starlette's StreamingResponse first
    opens an anyio task group and starts the stream in a second task (a loop iteration and a
    task group per answer before the first byte). A client that hangs up is heard by one
    asyncio task, which cancels the stream as Starlette's does: the body's iterator is closed
    (the edge stops waiting for the reply; the turn goes on)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.current_task()
        assert streaming is not None
        gone = False

        async def hang_up() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            streaming.cancel()

        listener = asyncio.ensure_future(hang_up())
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not gone:
                raise
            streaming.uncancel()
        finally:
            listener.cancel()


class _BodyTooLarge(Exception):
    pass


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body once, then the connection's own messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
