"""The router's sends through its sync shadow must not swallow the wake-up of an inbound frame.

ZMQ_FD is edge-triggered: every send, recv or ZMQ_EVENTS read processes the socket's pending
commands and clears the FD, including the `activate_read` that announces a frame from a peer.
pyzmq re-checks after its own sends; `Router.send` goes through the shadow socket, so it has to
re-check too, or the frame waits for the next unrelated frame (a heartbeat, up to a second: the
warm-hop benchmark's rare 25-900 ms p99 stalls, issue 4).
"""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import Iterator

import pytest
import zmq

from orchestrator.supervision.table import ProcessEntry
from protocol.codec import encode
from protocol.ids import ORCHESTRATOR
from protocol.messages import (
    ChildState,
    Heartbeat,
    HeartbeatPayload,
    Status,
    StatusPayload,
)
from tests.unit.orchestrator.conftest import Routed


@pytest.fixture
def wired(routed: Routed) -> Iterator[tuple[Routed, zmq.Socket[bytes]]]:
    """The router with a blocking peer: the test controls exactly when each frame is sent."""
    peer_ctx = zmq.Context()
    peer = peer_ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.IDENTITY, routed.entry.routing_id)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(routed.endpoint)
    try:
        yield routed, peer
    finally:
        peer.close()
        peer_ctx.term()


def _status(entry: ProcessEntry, state: ChildState) -> bytes:
    return encode(Status(from_=entry.id_text, to=ORCHESTRATOR, payload=StatusPayload(state=state)))


async def test_a_frame_announced_during_a_send_still_reaches_the_loop(
    wired: tuple[Routed, zmq.Socket[bytes]],
) -> None:
    routed, peer = wired
    router, entry, statuses = routed.router, routed.entry, routed.lifecycle.statuses
    async with asyncio.timeout(5):
        # a first frame: the router has drained the socket and waits in `await recv()` again
        peer.send(_status(entry, ChildState.PROCESSING))
        assert (await statuses.get()).state is ChildState.PROCESSING
        # the next frame's activate_read command is in the socket's mailbox (FD readable) ...
        peer.send(_status(entry, ChildState.IDLE))
        readable, _, _ = select.select([router.sock.FD], [], [], 5)
        assert readable, "the peer's frame never reached the router's socket"
        # ... when the loop, before polling again, sends: the send takes that command (the
        # first send on a socket always processes commands: libzmq throttles only later ones)
        beat = HeartbeatPayload(seq=1, sent_at=time.time())
        assert router.send(entry, Heartbeat(from_=ORCHESTRATOR, to=entry.id_text, payload=beat))
        # without a re-check the frame would wait for an unrelated one that never comes
        assert (await statuses.get()).state is ChildState.IDLE
