"""The child's DEALER on the loop (`agent_process.dealer`), against a real ROUTER over ipc.

ZMQ_FD is edge-triggered: a send that processes the command announcing an inbound frame clears
the FD, so the receive parked on it must be woken by the Dealer itself (the same stall the
router's re-check fixed, tests/unit/orchestrator/test_router_wakeup.py).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import zmq

from agent_process.dealer import Dealer

TIMEOUT = 5
IDENTITY = b"agent:a:k:1"
_opened: list[zmq.Socket[bytes]] = []


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    while _opened:  # the ROUTERs the test opened, before the context can end
        _opened.pop().close(linger=0)
    context.term()


@pytest.fixture
async def dealer(ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path) -> AsyncIterator[Dealer]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, IDENTITY)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{tmp_path}/agents.sock")
    d = Dealer(sock, asyncio.get_running_loop())
    yield d
    d.close()


def _router(ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path) -> zmq.Socket[bytes]:
    """A ROUTER on the dealer's endpoint, returned once the dealer's handshake is done."""
    router = ctx.socket(zmq.ROUTER)
    _opened.append(router)
    router.setsockopt(zmq.LINGER, 0)
    monitor = router.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    router.bind(f"ipc://{tmp_path}/agents.sock")
    assert monitor.poll(TIMEOUT * 1000), "the dealer never connected"
    monitor.recv_multipart()
    router.disable_monitor()
    monitor.close()
    return router


async def test_a_frame_announced_during_a_send_still_wakes_the_parked_recv(
    ctx: zmq.Context[zmq.Socket[bytes]], dealer: Dealer, tmp_path: Path
) -> None:
    router = _router(ctx, tmp_path)
    async with asyncio.timeout(TIMEOUT):
        router.send_multipart([IDENTITY, b"first"])
        assert await dealer.recv() == b"first"
        parked = asyncio.ensure_future(dealer.recv())
        await asyncio.sleep(0)  # one loop turn: the task runs up to its park on the FD
        assert not parked.done()
        # the next frame's activate_read command is in the socket's mailbox (FD readable) ...
        router.send_multipart([IDENTITY, b"second"])
        readable, _, _ = select.select([dealer.sock.FD], [], [], TIMEOUT)
        assert readable, "the frame never reached the dealer's socket"
        # ... when, before the loop polls, the dealer sends: its first send processes commands
        # (libzmq throttles only later ones) and takes that one, clearing the FD
        await dealer.send(b"beat")
        # without the Dealer's re-check the frame would wait for an unrelated one
        assert await parked == b"second"
        assert router.recv_multipart() == [IDENTITY, b"beat"]


async def test_frames_arrive_in_order_and_none_is_lost(
    ctx: zmq.Context[zmq.Socket[bytes]], dealer: Dealer, tmp_path: Path
) -> None:
    router = _router(ctx, tmp_path)
    async with asyncio.timeout(TIMEOUT):
        for i in range(200):
            router.send_multipart([IDENTITY, b"%d" % i])
            if i % 7 == 0:
                await dealer.send(b"interleaved")  # sends between receives change nothing
        got = [await dealer.recv() for _ in range(200)]
    assert got == [b"%d" % i for i in range(200)]


async def test_a_send_waits_at_the_high_water_mark_until_a_peer_takes_frames(
    ctx: zmq.Context[zmq.Socket[bytes]], dealer: Dealer, tmp_path: Path
) -> None:
    dealer.sock.setsockopt(zmq.SNDHWM, 1)
    async with asyncio.timeout(TIMEOUT):
        await dealer.send(b"one")  # queued on the pipe to the (absent) peer
        second = asyncio.ensure_future(dealer.send(b"two"))
        await asyncio.sleep(0)  # one loop turn: the send hits the high-water mark and parks
        assert not second.done()
        router = _router(ctx, tmp_path)  # a peer appears: the pipe drains
        await second
        assert router.recv_multipart() == [IDENTITY, b"one"]
        assert router.recv_multipart() == [IDENTITY, b"two"]
