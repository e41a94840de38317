"""The HTTP server of the connectors (webhook, slack, api): uvicorn on the connector's own
event loop (uvloop), HTTP/1.1 parsed by httptools, a Starlette app, and the limits every
server on a network port needs, whatever it serves:

- **Headers**: at most `maxHeaderBytes` (16 KiB) of request line and headers (431, as soon as
  the bytes pass it, ended or not), sent within `readTimeoutMs` (10 s) of the connection
  opening, or of the request's first byte on a kept-alive connection (408): a client that
  trickles its headers does not hold a connection (`_connection.py`).
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

Only uvicorn's public surface is used (`Config`, `Server.startup`, `on_tick`, `shutdown`):
the body's limits are ASGI middleware (`_bodies.BodyGuard`), and what ASGI cannot see (the
request head, connections, stalled writes) is `_connection.Connection`, an asyncio protocol
around the one uvicorn's `Config` resolves, handed to uvicorn as its HTTP protocol.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from bundles.sdk import load_sibling

Admission = load_sibling(__file__, "_admission").Admission
bodies = load_sibling(__file__, "_bodies")
BodyGuard = bodies.BodyGuard
EventStream = bodies.EventStream
"""Re-exported: the protocols stream their answers with it."""
connection = load_sibling(__file__, "_connection")
LINGER_S = connection.LINGER_S
joined = load_sibling(__file__, "_joined")
JoinedWrites = joined.JoinedWrites
JOIN_BYTES = joined.JOIN_BYTES
ErrorBody = Callable[[int, str, str], Mapping[str, Any]]
"""(status, code, message) -> the JSON body of a refusal, in the shape the server speaks."""
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


class HttpServer:
    """One uvicorn server for one Connection, in the connector's event loop."""

    def __init__(self, limits: Limits, error_body: ErrorBody = plain_error) -> None:
        self.limits = limits
        self.error_body = error_body
        admission = Admission(limits.max_connections, limits.max_connections_per_client)
        self.shared = connection.Shared(limits, error_body, admission, _uvicorn_http())
        self.protocol = type("Connection", (connection.Connection,), {"shared": self.shared})
        self.server: uvicorn.Server | None = None
        self.socket: socket.socket | None = None

    def mount(self, app: ASGIApp, head: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
        """The app to serve (before `serve`); `head` wraps what reads the body, to refuse a
        request on its head (a token) before its body is read."""
        guarded: ASGIApp = BodyGuard(app, self.limits, self.error_body)
        config = uvicorn.Config(
            connection.Requests(guarded if head is None else head(guarded)),
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


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("never served: it only lets uvicorn's Config resolve its protocol")


@functools.cache
def _uvicorn_http() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol on httptools, as its `Config` resolves the name: the one
    `_connection.Connection` drives."""
    config = uvicorn.Config(_no_app, http="httptools", ws="none", lifespan="off",
                            log_config=None, access_log=False)  # fmt: skip
    config.load()
    return config.http_protocol_class
