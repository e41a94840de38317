"""One connection of the connectors' HTTP server (`_http.py`), guarded at the asyncio level:
the limits an ASGI app cannot keep, because they hold before the app is called or outside any
request.

`Connection` is the `asyncio.Protocol` the server's socket serves. It owns the transport and
hands the bytes on to uvicorn's own HTTP protocol (the class uvicorn's `Config` resolves for
"httptools"), which it makes and drives through the `asyncio.Protocol` interface only:
nothing of uvicorn's is subclassed or read, so a uvicorn release that reshapes its protocol's
insides changes nothing here. In between it keeps:

- **the request head**: its bytes are counted on the raw stream up to the blank line that
  ends it (llhttp, uvicorn's parser, accepts no other end: a bare LF is a parse error), at
  most `maxHeaderBytes` (431), sent within `readTimeoutMs` of the connection opening or of
  the next request's first byte (408). No second parser: the head ends at the first
  CRLFCRLF after its first byte that is no CR or LF (empty lines before a request are
  skipped, as llhttp does), and the next head starts once the request's body has been read
  (what came in the same read as a head without a body is counted then);
- **admission**: `_admission.Admission` takes the connection or has it refused (503), and
  may evict it while it is idle;
- **writes**: joined per event-loop step (`_joined.JoinedWrites`), and cut after
  `writeTimeoutMs` of a client that does not read;
- **lingering**: a request answered before its body was read has its connection half-closed
  and what still comes discarded (`LINGER_S`).

What happens to a request is told by `Requests`, the outermost ASGI middleware: its app
started (with a body to come or not), its body was read whole, its app is done. uvicorn puts
a copy of the `app_state` it is given into every request's `scope["state"]`; each connection
hands uvicorn's protocol its own `app_state` naming itself, so a request finds its connection
without matching addresses.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bundles.sdk import load_sibling

Admission = load_sibling(__file__, "_admission").Admission
DRAIN_BYTES = load_sibling(__file__, "_bodies").DRAIN_BYTES
JoinedWrites = load_sibling(__file__, "_joined").JoinedWrites
ErrorBody = Callable[[int, str, str], Mapping[str, Any]]
"""(status, code, message) -> the JSON body of a refusal, in the shape the server speaks."""
LINGER_S = 2.0
"""How long a refused request's unread body is discarded before its connection is cut."""
HEAD_END = b"\r\n\r\n"
BLANK = b"\r\n"
STATE_KEY = "goondan.connection"
"""The key of a request's connection in its `scope["state"]` (taken out by `Requests`)."""


@dataclass(frozen=True, slots=True)
class Shared:
    """What a server's connections share."""

    limits: Any
    """The server's `_http.Limits`."""
    error_body: ErrorBody
    admission: Any
    """The server's `_admission.Admission`."""
    protocol: Callable[..., asyncio.Protocol]
    """uvicorn's HTTP protocol class, made once per connection with uvicorn's arguments."""


def raw_response(status: int, reason: str, payload: Mapping[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class Connection(asyncio.Protocol):
    """One connection: the guard around uvicorn's protocol for it (see the module's doc).

    The server makes a subclass with its own `shared` and hands it to uvicorn's `Config` as
    the HTTP protocol; uvicorn calls it as it would call its own."""

    shared: ClassVar[Shared]

    def __init__(self, **uvicorn_args: Any) -> None:
        self._args = uvicorn_args
        """config, server_state, app_state, _loop: for uvicorn's protocol, made once admitted."""
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._joined: Any = None
        """The transport as uvicorn's protocol writes to it (`_joined.JoinedWrites`)."""
        self._head_deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._linger_end: asyncio.TimerHandle | None = None
        self._in_head = True
        """Bytes received are a request head's (counted), not a body's."""
        self._head_bytes = 0
        self._began = False
        """The head has begun (a byte other than CR or LF came)."""
        self._tail = b""
        """The head's last bytes, for an end split between two reads."""
        self._waiting = False
        """A head ended; its app has not started yet."""
        self._after: tuple[bytes, int] = (b"", 0)
        """The read a head ended in, and where: what follows is the next request's head when
        this one turns out to have no body (a pipelining client's)."""
        self._running = 0
        """Requests whose app runs (more than one when a client pipelines)."""
        self._body_open = False
        """A running request's body may still come: closing now needs a linger."""
        self._linger_left = -1
        """Bytes of a refused request's body still discarded (-1: not lingering)."""

    # asyncio.Protocol: what the transport calls

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's is not an asyncio.Transport subclass: no isinstance)
        self._transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if not self.shared.admission.admit(self, str(peer[0]) if peer else ""):
            self._no_room(transport)
            return
        self._joined = joined = JoinedWrites(transport, asyncio.get_running_loop())
        joined.linger = self._linger
        app_state = {**self._args.pop("app_state", {}), STATE_KEY: self}
        self._inner = self.shared.protocol(**self._args, app_state=app_state)
        self._inner.connection_made(joined)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._linger_left >= 0:
            self._linger_left -= len(data)
            if self._linger_left < 0 and self._transport is not None:
                self._transport.abort()
            return
        inner = self._inner
        if inner is None:  # refused (503): its close is under way
            return
        if self._in_head and not self._head(data):
            return
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._inner is None or self._linger_left >= 0:
            return None  # the transport closes
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        """The client stopped reading (the kernel's buffers are full): it has `writeTimeoutMs`
        to read again, or the connection is cut. A plain close would wait for the buffer to
        drain, forever; the answer's writer would wait with it."""
        if self._inner is not None:
            self._inner.pause_writing()
        if self._write_deadline is None and self._transport is not None:
            timeout = self.shared.limits.write_timeout
            self._write_deadline = asyncio.get_running_loop().call_later(
                timeout, self._transport.abort
            )

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.shared.admission.leave(self)
        self._disarm()
        for timer in (self._write_deadline, self._linger_end):
            if timer is not None:
                timer.cancel()
        if self._inner is not None:
            self._inner.connection_lost(exc)

    # `_admission.Held`

    def idle(self) -> bool:
        """No request in progress and nothing left to write."""
        if self._linger_left >= 0:
            return True
        busy = self._running > 0 or self._waiting
        return not busy and not (self._joined is not None and self._joined.pending)

    def evict(self) -> None:
        self._disarm()
        if self._transport is not None:
            self._transport.abort()

    # what `Requests` tells

    def app_started(self, body: bool) -> None:
        self._waiting = False
        self._running += 1
        after, at = self._after
        self._after = (b"", 0)
        if body:
            self._body_open = True
            self._in_head = False
            return
        self._next_head()
        if at < len(after):  # passed on uncounted: counted now, before the next read
            self._head(after[at:])

    def body_read(self) -> None:
        self._body_open = False
        self._next_head()

    def app_done(self) -> None:
        self._running -= 1

    # the request head

    def _head(self, data: bytes) -> bool:
        """Count `data` as head bytes up to the head's end; False when it was refused."""
        if self._head_deadline is None:  # the first byte of a keep-alive connection's next one
            self._arm()
        start = 0
        if not self._began:
            start = len(data) - len(data.lstrip(BLANK))
            self._began = start < len(data)
        tail = self._tail
        window = tail + data if tail else data
        end = window.find(HEAD_END, start) if self._began else -1
        if end < 0:
            self._head_bytes += len(data)
            self._tail = window[-3:] if self._began else b""
            return self._within()
        ended = end + len(HEAD_END) - len(tail)
        self._head_bytes += ended
        if not self._within():
            return False
        self._disarm()  # the body's own deadline is the app's (`_bodies.BodyGuard`)
        self._in_head, self._waiting, self._after = False, True, (data, ended)
        return True

    def _within(self) -> bool:
        limit = self.shared.limits.max_header_bytes
        if self._head_bytes <= limit:
            return True
        message = f"request line and headers are limited to {limit} bytes"
        self._refuse(431, "Request Header Fields Too Large", "HEADERS_TOO_LARGE", message)
        return False

    def _next_head(self) -> None:
        """What comes next is the next request's head (its deadline starts at its first byte)."""
        if not self._in_head:
            self._in_head, self._head_bytes, self._began, self._tail = True, 0, False, b""

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._head_deadline = loop.call_later(self.shared.limits.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _too_slow(self) -> None:
        self._head_deadline = None
        if self._transport is None or self._transport.is_closing() or not self._in_head:
            return
        if self._running:  # a pipelined head while an answer is written: its turn comes
            self._arm()
            return
        message = f"the request was not sent within {self.shared.limits.read_timeout:g} s"
        self._refuse(408, "Request Timeout", "TIMEOUT", message)

    # refusals

    def _refuse(self, status: int, reason: str, suffix: str, message: str) -> None:
        """Answer and close; cut instead when an answer is being written (a second answer
        would land inside it)."""
        joined = self._joined
        if joined is None:
            return
        self._disarm()
        if self._running:
            joined.abort()
            return
        payload = self.shared.error_body(status, self.shared.limits.code(suffix), message)
        joined.write(raw_response(status, reason, payload))
        joined.close()

    def _no_room(self, transport: asyncio.Transport) -> None:
        message = (
            "every connection this server keeps (maxConnections, maxConnectionsPerClient per "
            "client address) has a request in progress; try again shortly"
        )
        payload = self.shared.error_body(503, self.shared.limits.code("BUSY"), message)
        transport.write(raw_response(503, "Service Unavailable", payload))
        transport.close()

    def _linger(self, raw: asyncio.Transport) -> bool:
        """At close: a request answered before its body came (refused on its head) has its
        connection half-closed, and what the client still sends discarded unparsed, until it
        closes, up to `maxBodyBytes` or for LINGER_S. A plain close with unread data would
        reset the connection, and the client might never read the answer."""
        if self._linger_left >= 0:
            return True
        if not self._body_open or raw.is_closing() or not raw.can_write_eof():
            return False
        raw.write_eof()
        self._linger_left = self.shared.limits.max_body_bytes + DRAIN_BYTES
        raw.resume_reading()
        self._linger_end = asyncio.get_running_loop().call_later(LINGER_S, raw.close)
        return True


class Requests:
    """ASGI middleware, the outermost: tells each request's `Connection` that its app starts
    (with a body to come or not), that its body has been read whole, and that its app is
    done. A request without a connection (none is made outside `_http.HttpServer`) passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.get("state")
        conn = state.pop(STATE_KEY, None) if isinstance(state, dict) else None
        if conn is None:
            await self.app(scope, receive, send)
            return
        body = _has_body(scope["headers"])
        conn.app_started(body)
        try:
            await self.app(scope, _watched(receive, conn) if body else receive, send)
        finally:
            conn.app_done()


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """A request has a body when it says so (RFC 9112 §6.3): Transfer-Encoding, or a
    Content-Length other than 0."""
    for name, value in headers:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip().lstrip(b"0"):
            return True
    return False


def _watched(receive: Receive, conn: Connection) -> Receive:
    async def watched() -> Message:
        message = await receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            conn.body_read()
        return message

    return watched
