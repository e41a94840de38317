"""The child's DEALER: ZMTP 3 (`protocol.zmtp`) over the daemon's ipc socket, on the event loop.

The daemon's side is a ZeroMQ ROUTER; the child speaks ZeroMQ's wire protocol to it on an
asyncio unix transport instead of through libzmq. A libzmq context is two threads per process
(I/O and reaper) and every message crossed between them: measured per agent process over its
handshake and a turn, 2.7 ms of CPU and ~410 page faults through libzmq against 1.3 ms and
~250 without (docs/performance.md, "Virtual actors at scale"), on the path of every new
instance. What of libzmq's behaviour a child relies on is kept:

- the routing identity (the process id and the spawn's nonce) goes in READY, as libzmq sends
  ZMQ_IDENTITY;
- frames are sent in order, never split; `send` waits while the transport's buffer is over its
  high-water mark and `send_nowait` then refuses (libzmq's SNDHWM), and reading stops while
  RCVHWM frames wait to be taken (the ROUTER then holds or drops, as it would for libzmq);
- closing flushes what is queued for up to the linger time, and waits for the daemon to have
  read it (`aclose`).

What differs: a connection the daemon closes is seen at once (`recv` raises
`ConnectionError`) instead of a silent reconnect, and a peer that breaks the protocol closes the
connection the same way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import cast

from protocol import zmtp

RCVHWM = 1000
"""Frames received and not yet taken before the transport stops reading (libzmq's default)."""


class Dealer(asyncio.Protocol):
    """`send` and `recv` of single frames on a connection to a ROUTER (`connect`)."""

    def __init__(self, identity: bytes, max_frame: int) -> None:
        self._identity = identity
        self._reader = zmtp.FrameReader(max_frame)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._inbox: collections.deque[bytes] = collections.deque()
        self._ready: asyncio.Future[None] = self._loop.create_future()
        """Done when the peer's READY came, or the connection failed first (`_lost` says)."""
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._readable: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._paused = False
        """Writing paused: the transport's buffer is over its high-water mark."""
        self._reading_paused = False
        self._lost: ConnectionError | None = None

    @classmethod
    async def connect(cls, endpoint: str, identity: bytes, max_frame: int) -> Dealer:
        """Connected to the ROUTER at `endpoint` (`ipc://PATH`), its greeting and READY checked;
        raises OSError (nobody there) or ConnectionError (the handshake failed). The caller
        bounds the wait."""
        loop = asyncio.get_running_loop()
        path = endpoint.removeprefix("ipc://")
        if path == endpoint:
            raise ConnectionError(f"not an ipc:// endpoint: {endpoint}")
        _, dealer = await loop.create_unix_connection(lambda: cls(identity, max_frame), path)
        try:
            await asyncio.shield(dealer._ready)
        except BaseException:
            dealer.abort()
            raise
        if dealer._lost is not None:
            raise dealer._lost
        return dealer

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self._transport = transport = cast(asyncio.Transport, transport)
        transport.write(zmtp.GREETING + zmtp.ready(b"DEALER", self._identity))

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        try:
            for flags, body in reader.feed(data):
                self._take(flags, body)
        except zmtp.ZmtpError as exc:
            reader.error = exc
        if reader.error is not None:
            self._fail(ConnectionError(f"{reader.error.code}: {reader.error.message}"))
        elif len(self._inbox) >= RCVHWM and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        if self._inbox:
            _wake(self._readable)

    def _take(self, flags: int, body: bytes) -> None:
        if not self._ready.done():
            zmtp.check_ready(flags, body)
            self._ready.set_result(None)
        elif flags & zmtp.COMMAND:
            pong = zmtp.answer(body)
            if pong is not None and self._transport is not None:
                self._transport.write(pong)
        elif flags & zmtp.MORE:
            raise zmtp.ZmtpError(zmtp.E_PROTOCOL_DECODE, "a message of more than one frame")
        else:
            self._inbox.append(body)

    def eof_received(self) -> bool:
        return False  # the daemon closed its end: close ours (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc is not None else ""
        self._fail(ConnectionError(f"the orchestrator closed the connection{reason}"))
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        _wake(self._writable)

    # FrameSocket (agent_process.link)

    async def send(self, data: bytes) -> None:
        """Queue one frame; waits only while the buffer is over its high-water mark. After the
        connection is lost it is dropped: `recv` reports the loss."""
        while self._paused and self._lost is None:
            # one future for every sender waiting (a turn's, the heartbeats', the bridge's);
            # shielded: a cancelled sender must not cancel the others' wait
            if self._writable is None or self._writable.done():
                self._writable = self._loop.create_future()
            await asyncio.shield(self._writable)
        self.send_nowait(data)

    def send_nowait(self, data: bytes) -> bool:
        """Queue one frame if the buffer allows it now; False otherwise."""
        if self._paused or self._lost is not None or self._transport is None:
            return False
        self._transport.write(zmtp.frame(data))
        return True

    async def recv(self) -> bytes:
        """The next frame (one receiver at a time); ConnectionError once the connection is
        gone and every frame before that was taken."""
        while not self._inbox:
            if self._lost is not None:
                raise self._lost
            self._readable = self._loop.create_future()
            try:
                await self._readable
            finally:
                self._readable = None
        data = self._inbox.popleft()
        if self._reading_paused and len(self._inbox) < RCVHWM // 2:
            self._reading_paused = False
            if self._transport is not None:
                self._transport.resume_reading()
        return data

    async def aclose(self, linger: float) -> None:
        """Close after flushing what is queued, waiting at most `linger` seconds for it.

        Our end's EOF goes out after the last frame, and the close waits for the daemon to close
        its end: libzmq reads the stream in order, so by then our last frame (a start_error, a
        shutdown_ack) is queued in the daemon's socket before this process exits, and the
        daemon, whose loop takes ready descriptors in the order they became ready, reads it
        before it hears of the exit (it took the exit for a crash when it heard of it first)."""
        transport = self._transport
        if transport is None:
            return
        if self._lost is None and transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(linger):
                await asyncio.shield(self._closed)
        self.abort()

    def abort(self) -> None:
        """Close now, dropping what is queued."""
        if self._transport is not None and not self._closed.done():
            self._transport.abort()

    def _fail(self, error: ConnectionError) -> None:
        if self._lost is None:
            self._lost = error
        _wake(self._ready)
        _wake(self._readable)
        _wake(self._writable)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)
