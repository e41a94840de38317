"""`GET /metrics` on the daemon's event loop: a minimal HTTP/1.1 server for Prometheus.

Why not prometheus_client's `start_http_server`: it serves from a thread, and the scrape reads
the process table, mailboxes and journal, which belong to the event loop. Here those are read
in the loop between two frames (`Scrape.refresh`, a snapshot), and the text is rendered
in a worker thread: rendering is proportional to the series, and the loop, which every frame
waits on, must not stall on a large registry (issue 27, F8). Scrapes render one at a time.
One request per connection (`Connection: close`); a request head over 8 KiB or slower than
5 s is dropped; anything but `GET|HEAD /metrics` gets 404/405.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from orchestrator.observe.metrics import Scrape

HEAD_LIMIT = 8192
READ_TIMEOUT = 5.0
log = structlog.get_logger("goondan.metrics")


def listen(host: str, port: int) -> socket.socket:
    """The endpoint's socket, listening (connections wait in its backlog until `serve`);
    raises OSError (a port taken, a bad host)."""
    sock = socket.create_server((host, port), backlog=100)
    sock.setblocking(False)
    bound = sock.getsockname()
    log.info("metrics_listening", host=bound[0], port=bound[1], path="/metrics")
    return sock


async def serve(metrics: Scrape, sock: socket.socket) -> asyncio.Server:
    """Answer scrapes on `sock` (from `listen`) from now on."""

    rendering = asyncio.Lock()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _answer(metrics, reader, writer, rendering)
        except (TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, OSError):
            pass  # a slow, oversized or vanished client: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, sock=sock, limit=HEAD_LIMIT)


async def _answer(
    metrics: Scrape,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    rendering: asyncio.Lock,
) -> None:
    async with asyncio.timeout(READ_TIMEOUT):
        head = await reader.readuntil(b"\r\n\r\n")
    method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
    path = rest.split(" ", 1)[0].split("?", 1)[0]
    if path != "/metrics":
        _respond(writer, 404, b"not found: the metrics are at /metrics\n")
    elif method not in ("GET", "HEAD"):
        _respond(writer, 405, b"use GET\n", extra=b"Allow: GET, HEAD\r\n")
    else:
        async with rendering:  # one snapshot per rendering
            await metrics.refresh()
            body = await asyncio.to_thread(generate_latest, metrics.registry)
        _respond(writer, 200, body, CONTENT_TYPE_LATEST.encode(), head_only=method == "HEAD")
    await writer.drain()


def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: bytes = b"text/plain; charset=utf-8",
    *,
    extra: bytes = b"",
    head_only: bool = False,
) -> None:
    reason = {200: b"OK", 404: b"Not Found", 405: b"Method Not Allowed"}[status]
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
        % (status, reason, content_type, len(body), extra)
    )
    if not head_only:
        writer.write(body)
