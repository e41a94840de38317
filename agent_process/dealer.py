"""The child's DEALER on the running loop: a plain `zmq.Socket` whose ZMQ_FD is a loop reader.

zmq.asyncio does the same through a layer of futures, poller bookkeeping and IntFlag enum
arithmetic on every operation; each of those shared (fork-server) functions and enum members
an idle child runs costs it a private copy of their pages. This is the part a child needs:
one awaited receive at a time, and sends that only wait when the high-water mark is reached.

ZMQ_FD is edge-triggered: every send, receive or ZMQ_EVENTS read processes the socket's
pending commands and clears the FD, including the one announcing an inbound frame. So after
each send the socket's events are read again and a parked receive is woken if a frame is
waiting (orchestrator/routing/router.py has the same re-check; without it a frame waits for the next
unrelated one).
"""

from __future__ import annotations

import asyncio

import zmq

# plain ints: the zmq constants are IntFlag members, whose arithmetic runs enum code
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)


class Dealer:
    """`send` and `recv` of single frames on a connected socket, driven by `loop`."""

    def __init__(self, sock: zmq.Socket[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self._loop = loop
        self._fd = int(sock.getsockopt(zmq.FD))
        self._readable: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        loop.add_reader(self._fd, self._on_events)

    async def send(self, data: bytes) -> None:
        """Queue one frame; waits only while the high-water mark is reached."""
        while True:
            try:
                self.sock.send(data, _NOBLOCK)
            except zmq.Again:
                self._writable = self._loop.create_future()
                await self._park(self._writable)
                continue
            self._on_events()  # the send may have taken the wake-up of an inbound frame
            return

    def send_nowait(self, data: bytes) -> bool:
        """Queue one frame if the high-water mark allows it now; False otherwise."""
        try:
            self.sock.send(data, _NOBLOCK)
        except zmq.Again:
            return False
        self._on_events()
        return True

    async def recv(self) -> bytes:
        """The next frame (one receiver at a time)."""
        while True:
            try:
                data: bytes = self.sock.recv(_NOBLOCK)
            except zmq.Again:
                self._readable = self._loop.create_future()
                await self._park(self._readable)
                continue
            return data

    def close(self) -> None:
        """Stop watching the FD (before the socket closes)."""
        self._loop.remove_reader(self._fd)
        self.sock.close()

    async def _park(self, fut: asyncio.Future[None]) -> None:
        try:
            await fut
        finally:
            if self._readable is fut:
                self._readable = None
            elif self._writable is fut:
                self._writable = None

    def _on_events(self) -> None:
        """The FD fired (or a send ran): wake whoever can now go on."""
        if self.sock.closed:
            return
        events = int(self.sock.getsockopt(_EVENTS))  # int() for mypy: no typing.cast call
        if events & _POLLIN:
            _wake(self._readable)
        if events & _POLLOUT:
            _wake(self._writable)


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)
