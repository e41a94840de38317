"""The HTTP server of the connectors (webhook, slack, api): uvicorn on the connector's own
event loop (uvloop), HTTP/1.1 parsed by httptools, a Starlette app, and the limits every
server on a network port needs, whatever it serves:

- **Headers**: at most `maxHeaderBytes` (16 KiB) of request line and headers (431), sent within
  `readTimeoutMs` (10 s) of the connection opening or the previous answer (408): a client that
  trickles its headers does not hold a connection.
- **Body**: at most `maxBodyBytes` (1 MiB, 413 as soon as Content-Length says so, or when a
  chunked body passes it), read whole within `readTimeoutMs` (408) before the app sees it
  (`_bodies.py`).
- **Answers**: a client that stops reading stalls its own connection only (writes wait for
  it: buffers stay bounded); after `writeTimeoutMs` (30 s) without reading it is cut. Idle
  keep-alive connections close after 5 s.
- **Connections**: at most `maxConnections` (1000), and `maxConnectionsPerClient` (100) from
  one client address; at a limit the oldest idle connection is closed to make room
  (`_admission.py`), and only when every one has a request in progress is a new one refused
  (503). A server may check a request's head (`mount(head=)`: the api connector's token)
  before its body is read: a refused request's body is then discarded as it comes, at most
  `maxBodyBytes` of it for `LINGER_S`, after the answer (closing with unread data would reset
  the connection before the client reads the answer).

`HttpServer.bind` (from a connector's `start`) binds the port, so a port in use is a start
error naming it; `HttpServer.serve` (from `run`) serves until cancelled, then closes every
connection. uvicorn's own `serve()` is not used: it would take over the process's signals,
which belong to the connector host.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bundles.sdk import load_sibling

Admission = load_sibling(__file__, "_admission").Admission
bodies = load_sibling(__file__, "_bodies")
BodyGuard = bodies.BodyGuard
EventStream = bodies.EventStream
"""Re-exported: the protocols stream their answers with it."""
ErrorBody = Callable[[int, str, str], Mapping[str, Any]]
"""(status, code, message) -> the JSON body of a refusal, in the shape the server speaks."""
LINGER_S = 2.0
"""How long a refused request's unread body is discarded before its connection is cut."""
TICK_S = 1.0
"""How often the server refreshes its Date header (and nothing else: it does not poll)."""


def plain_error(status: int, code: str, message: str) -> Mapping[str, Any]:
    return {"error": {"code": code, "message": message}}


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 1024 * 1024
    max_header_bytes: int = 16 * 1024
    read_timeout: float = 10.0
    write_timeout: float = 30.0
    keep_alive: float = 5.0
    max_connections: int = 1000
    max_connections_per_client: int = 100
    code_prefix: str = "E_HTTP"
    """Refusals are coded `<prefix>_TOO_LARGE`, `_TIMEOUT`, `_HEADERS_TOO_LARGE`,
    `_BAD_REQUEST`, `_BUSY`."""

    @classmethod
    def of(cls, config: Mapping[str, Any], code_prefix: str) -> Limits:
        return cls(
            max_body_bytes=int(config.get("maxBodyBytes", 1024 * 1024)),
            max_header_bytes=int(config.get("maxHeaderBytes", 16 * 1024)),
            read_timeout=int(config.get("readTimeoutMs", 10_000)) / 1000,
            write_timeout=int(config.get("writeTimeoutMs", 30_000)) / 1000,
            max_connections=int(config.get("maxConnections", 1000)),
            max_connections_per_client=int(config.get("maxConnectionsPerClient", 100)),
            code_prefix=code_prefix,
        )

    def code(self, suffix: str) -> str:
        return f"{self.code_prefix}_{suffix}"


def _raw_response(status: int, reason: str, payload: Mapping[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _HeaderOverflow(Exception):
    """Raised inside a parser callback: httptools turns it into a parse error."""


JOIN_BYTES = 16 * 1024


class JoinedWrites:
    """A connection's transport whose writes within one event-loop step go out as one.

    uvicorn writes an answer's status line and headers, then each body part, with a write of
    their own, and with Nagle off (TCP_NODELAY) each is a TCP segment the client wakes up for:
    the head of a streamed completion and its first chunk, or a JSON answer's head and body,
    were two. Joined, the client reads them in one go (bench_stream's first delta through the
    edge). The join happens when the step ends (`call_soon`), or at once past JOIN_BYTES: the
    transport's buffer must see a big answer's writes as they come, or its flow control (the
    pause that makes the app wait for a slow reader) would never start. A close sends what is
    joined first; an abort drops it with the rest."""

    __slots__ = ("_loop", "_parts", "_size", "_transport", "linger")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._parts: list[bytes] = []
        self._size = 0
        self.linger: Callable[[asyncio.Transport], bool] | None = None
        """Asked at close: True when it keeps the connection open a little (its own close)."""

    @property
    def pending(self) -> bool:
        """Writes still to go out (joined, or in the transport's buffer)."""
        return bool(self._parts) or self._transport.get_write_buffer_size() > 0

    def write(self, data: bytes) -> None:
        if not self._parts:
            self._loop.call_soon(self._flush)
        self._parts.append(data)
        self._size += len(data)
        if self._size >= JOIN_BYTES:
            self._flush()

    def _flush(self) -> None:
        parts, self._parts, self._size = self._parts, [], 0
        if parts and not self._transport.is_closing():
            # one write: uvloop's writelines does not pause a protocol past the high-water mark
            self._transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self) -> None:
        self._flush()
        if self.linger is None or not self.linger(self._transport):
            self._transport.close()

    def abort(self) -> None:
        self._parts, self._size = [], 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # reading, flow control, extra info: as is
        return getattr(self._transport, name)


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size limit and a deadline on the request head
    (uvicorn has neither for httptools: headers are kept without bound, and a connection that
    sends nothing, or half a header, is held forever)."""

    limits: Limits = Limits()
    error_body: ErrorBody = staticmethod(plain_error)
    admission: Any = None
    """The server's `_admission.Admission` (each server's subclass has its own)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._refusal: bytes | None = None
        self._head_deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._joined: JoinedWrites | None = None
        self._linger_left = -1
        """Bytes of a refused request's body still discarded (-1: not lingering)."""
        self._linger_end: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._joined = JoinedWrites(transport, self.loop)
        self._joined.linger = self._linger
        joined: Any = self._joined
        super().connection_made(joined)
        if not self.admission.admit(self, str(self.client[0]) if self.client else ""):
            self._no_room()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.admission.leave(self)
        self._disarm()
        for timer in (self._write_deadline, self._linger_end):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def idle(self) -> bool:
        """No request in progress and nothing left to write (`_admission.Held`)."""
        if self._linger_left >= 0:
            return True
        busy = self.cycle is not None and not self.cycle.response_complete
        return not busy and not (self._joined is not None and self._joined.pending)

    def evict(self) -> None:
        self._disarm()
        self.transport.abort()

    def _no_room(self) -> None:
        message = (
            "every connection this server keeps (maxConnections, maxConnectionsPerClient per "
            "client address) has a request in progress; try again shortly"
        )
        payload = self.error_body(503, self.limits.code("BUSY"), message)
        self.transport.write(_raw_response(503, "Service Unavailable", payload))
        self.transport.close()

    def _linger(self, raw: asyncio.Transport) -> bool:
        """At close: a request answered before its body came (refused on its head) has its
        connection half-closed, and what the client still sends discarded unparsed, until it
        closes, up to `maxBodyBytes` or for LINGER_S. A plain close with unread data would
        reset the connection, and the client might never read the answer."""
        if self._linger_left >= 0:
            return True
        cycle = self.cycle
        if cycle is None or not cycle.more_body or raw.is_closing() or not raw.can_write_eof():
            return False
        raw.write_eof()
        self._linger_left = self.limits.max_body_bytes + bodies.DRAIN_BYTES
        self.flow.resume_reading()
        self._linger_end = self.loop.call_later(LINGER_S, raw.close)
        return True

    def data_received(self, data: bytes) -> None:
        if self._linger_left < 0:
            super().data_received(data)
            return
        self._linger_left -= len(data)
        if self._linger_left < 0:
            self.transport.abort()

    def _arm(self) -> None:
        self._disarm()
        self._head_bytes = 0
        self._head_deadline = self.loop.call_later(self.limits.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_deadline is None:  # a keep-alive connection's next request
            self._arm()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            message = (
                f"request line and headers are limited to {self.limits.max_header_bytes} bytes"
            )
            payload = self.error_body(431, self.limits.code("HEADERS_TOO_LARGE"), message)
            self._refusal = _raw_response(431, "Request Header Fields Too Large", payload)
            raise _HeaderOverflow

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()  # the body's own deadline is the app's (BodyGuard)
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            super().send_400_response(msg)
            return
        self.transport.write(self._refusal)
        self.transport.close()

    def pause_writing(self) -> None:
        """The client stopped reading (the kernel's buffers are full): it has `writeTimeoutMs`
        to read again, or the connection is cut. A plain close would wait for the buffer to
        drain, forever; the answer's writer would wait with it."""
        super().pause_writing()
        if self._write_deadline is None:
            self._write_deadline = self.loop.call_later(
                self.limits.write_timeout, self.transport.abort
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _too_slow(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing() or (
            self.cycle is not None and not self.cycle.response_complete
        ):
            return
        message = f"the request was not sent within {self.limits.read_timeout:g} s"
        payload = self.error_body(408, self.limits.code("TIMEOUT"), message)
        self.transport.write(_raw_response(408, "Request Timeout", payload))
        self.transport.close()


class HttpServer:
    """One uvicorn server for one Connection, in the connector's event loop."""

    def __init__(self, limits: Limits, error_body: ErrorBody = plain_error) -> None:
        self.limits = limits
        self.error_body = error_body
        admission = Admission(limits.max_connections, limits.max_connections_per_client)
        own = {"limits": limits, "error_body": staticmethod(error_body), "admission": admission}
        self.protocol = type("GuardedHttpTools", (GuardedHttpTools,), own)
        self.server: uvicorn.Server | None = None
        self.socket: socket.socket | None = None

    def mount(self, app: ASGIApp, head: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
        """The app to serve (before `serve`); `head` wraps what reads the body, to refuse a
        request on its head (a token) before its body is read."""
        guarded: ASGIApp = BodyGuard(app, self.limits, self.error_body)
        config = uvicorn.Config(
            guarded if head is None else head(guarded),
            http=self.protocol,
            loop="none",
            lifespan="off",
            ws="none",
            log_config=None,
            access_log=False,
            server_header=False,
            # X-Forwarded-* is not trusted, not even from loopback (uvicorn's default): nothing
            # here needs the client's address, and a local process could forge it
            proxy_headers=False,
            timeout_keep_alive=int(self.limits.keep_alive),
            timeout_graceful_shutdown=2,
            # not uvicorn's limit: it counts idle connections too, so idle sockets made every
            # request a 503; connections are admitted by `Admission` instead
            limit_concurrency=None,
        )
        config.load()
        self.server = uvicorn.Server(config)
        self.server.lifespan = config.lifespan_class(config)

    async def bind(self, host: str, port: int) -> None:
        """Listen on host:port (a port in use raises OSError naming it). Connections wait in
        the kernel's backlog until `serve` runs."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server((host, port), family=family, backlog=2048)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
        sock.setblocking(False)
        self.socket = sock

    @property
    def address(self) -> tuple[str, int]:
        assert self.socket is not None, "bind() first"
        name = self.socket.getsockname()
        return str(name[0]), int(name[1])

    async def serve(self) -> None:
        """Serve until cancelled; then stop accepting and close every connection."""
        server, sock = self.server, self.socket
        assert server is not None, "mount() first"
        assert sock is not None, "bind() first"
        try:
            await server.startup(sockets=[sock])
            while True:
                await server.on_tick(0)  # the Date header, once a second
                await asyncio.sleep(TICK_S)
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await server.shutdown(sockets=[sock])
            sock.close()
