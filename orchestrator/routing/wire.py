"""The agents ROUTER socket's mechanics, apart from what the router decides (ARCHITECTURE.md §3-4).

Receiving uses the drain pattern of ARCHITECTURE.md §8: every queued message (up to DRAIN_MAX
per loop iteration) is taken through a sync shadow of the socket and handed on, then the serve
parks on a future of its own that a loop reader of the socket's ZMQ_FD resolves. Awaiting
zmq.asyncio's `recv` instead cost a future, poller bookkeeping and enum arithmetic per wake-up
on the warm hop. Sending goes through the shadow without awaiting.
ROUTER_MANDATORY turns an unroutable send into an error the caller counts and answers, never a
silent drop.

ZMQ_FD is edge-triggered: a send through the shadow can consume the `activate_read` command
that announced an inbound frame, which would then wait for the next unrelated frame (issue 4:
25-900 ms warm-hop stalls, each ended by some other child's heartbeat). So every send schedules
one re-check of the socket per loop iteration, as pyzmq does after its own sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import zmq
import zmq.asyncio

DRAIN_MAX = 1000
MAX_FRAME_BYTES = 16 << 20
"""The default limit of one frame on the agents socket (`Swarm.spec.policy.maxFrameBytes`)."""
HWM = 100_000
# plain ints: pyzmq's flag enums cost several µs per message in enum arithmetic
NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)

Frames = list[bytes]


PEER_GONE = "peer not connected"
"""Why a send to a process failed when its socket is closed: it is exiting, or gone."""


class RouterSocket:
    def __init__(
        self, ctx: zmq.asyncio.Context, endpoint: str, max_frame_bytes: int = MAX_FRAME_BYTES
    ) -> None:
        self.endpoint = endpoint
        self.max_frame_bytes = max_frame_bytes
        self.sock = ctx.socket(zmq.ROUTER)
        # a bigger frame closes its connection before it is read: memory stays flat
        self.sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, HWM)
        self.sock.setsockopt(zmq.RCVHWM, HWM)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.shadow: zmq.Socket[bytes] = zmq.Socket.shadow(self.sock.underlying)
        self._recheck_due = False
        self._readable: asyncio.Future[None] | None = None
        self._unwatch: Callable[[], object] | None = None

    async def serve(self, on_frames: Callable[[Frames], None]) -> None:
        """Hand every inbound message (its frames) to `on_frames`, forever."""
        loop = asyncio.get_running_loop()
        shadow = self.shadow
        fd = int(shadow.getsockopt(zmq.FD))
        loop.add_reader(fd, self._wake)
        self._unwatch = lambda: loop.remove_reader(fd)
        try:
            while True:
                for _ in range(DRAIN_MAX):
                    try:
                        frames = shadow.recv_multipart(NOBLOCK)
                    except zmq.Again:
                        break
                    on_frames(frames)
                else:  # more queued: let the loop's other work in first
                    await asyncio.sleep(0)
                    continue
                self._readable = loop.create_future()
                try:
                    await self._readable
                finally:
                    self._readable = None
        finally:
            self._stop_watching()

    def _wake(self) -> None:
        """The FD fired (or a send's re-check saw a frame): the parked serve goes on."""
        readable = self._readable
        if readable is not None and not readable.done():
            readable.set_result(None)

    def _stop_watching(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()  # before the socket (and its FD) closes

    def send(self, routing_id: bytes, data: bytes) -> str | None:
        """Send without awaiting; None when sent, else why it could not be routed."""
        shadow = self.shadow
        self._recheck_soon()  # the send below may take the command that announces a frame
        try:
            shadow.send(routing_id, SNDMORE | NOBLOCK)
            shadow.send(data, NOBLOCK)
        except zmq.Again:
            return "high-water mark reached"
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            return PEER_GONE
        return None

    def close(self) -> None:
        self._stop_watching()
        self.sock.close(linger=0)

    def _recheck_soon(self) -> None:
        """Once per loop iteration after sends: read ZMQ_EVENTS and drain if a frame waits."""
        if self._recheck_due:
            return
        self._recheck_due = True
        try:
            asyncio.get_running_loop().call_soon(self._recheck)
        except RuntimeError:  # a caller outside the loop: nobody serves yet
            self._recheck_due = False

    def _recheck(self) -> None:
        self._recheck_due = False
        if not self.sock.closed and int(self.shadow.getsockopt(EVENTS)) & POLLIN:
            self._wake()
