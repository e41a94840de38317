"""The writes of one connection of the connectors' HTTP server (`_connection.py`), joined
per event-loop step.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

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
