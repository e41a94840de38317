"""The child's DEALER (`agent_process.dealer`): ZMTP on the event loop against a real ZeroMQ
ROUTER over ipc, and against a hostile peer at the endpoint (a plain unix server here), which
gets the connection closed (`ConnectionError`), never a hang or another exception."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from agent_process.dealer import RCVHWM, Dealer
from protocol import zmtp

TIMEOUT = 10
IDENTITY = b"agent:a:k:1#0123456789abcdef"
LIMIT = 4 << 20


def _endpoint(router: zmq.asyncio.Socket) -> str:
    return router.getsockopt_string(zmq.LAST_ENDPOINT)


async def test_frames_go_both_ways_in_order_under_the_routing_identity(
    router: zmq.asyncio.Socket,
) -> None:
    payloads = [b"", b"x", b"y" * 255, b"z" * 256, bytes(range(256)) * 4096]  # short and LONG
    async with asyncio.timeout(TIMEOUT):
        dealer = await Dealer.connect(_endpoint(router), IDENTITY, LIMIT)
        try:
            for i in range(200):
                await dealer.send(payloads[i % len(payloads)] + str(i).encode())
            for i in range(200):
                identity, frame = await router.recv_multipart()
                assert identity == IDENTITY
                assert frame == payloads[i % len(payloads)] + str(i).encode()
            for i in range(200):
                await router.send_multipart([IDENTITY, payloads[i % len(payloads)] + b"r%d" % i])
            for i in range(200):
                assert await dealer.recv() == payloads[i % len(payloads)] + b"r%d" % i
        finally:
            await dealer.aclose(1.0)


async def test_a_full_peer_makes_send_wait_and_send_nowait_refuse(tmp_path: Path) -> None:
    """A peer that stops reading: the unix socket, then the transport's buffer fill up."""
    big, resume = b"b" * (1 << 20), asyncio.Event()
    taken: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HANDSHAKE)
        await reader.readexactly(len(zmtp.ready(b"DEALER", IDENTITY)))
        await resume.wait()
        taken.set_result(await reader.read())

    async with asyncio.timeout(TIMEOUT), fake_router(tmp_path, script) as end:
        dealer = await Dealer.connect(end, IDENTITY, LIMIT)
        try:
            sent = 0
            while dealer.send_nowait(big):
                sent += 1
                await asyncio.sleep(0)  # the transport writes what the socket takes
            assert 0 < sent < 200  # refused once the transport's buffer is over its mark
            # several senders wait at once (a turn, the heartbeats); one of them gives up
            waiting = [asyncio.ensure_future(dealer.send(b"last %d" % i)) for i in range(3)]
            given_up = asyncio.ensure_future(dealer.send(b"never"))
            for _ in range(10):
                await asyncio.sleep(0)
            assert not any(w.done() for w in [*waiting, given_up])
            given_up.cancel()
            resume.set()
            await asyncio.gather(*waiting)
        finally:
            await dealer.aclose(5.0)
        stream = await taken
    reader = zmtp.FrameReader(LIMIT)
    frames = reader.feed(zmtp.GREETING + stream)
    assert [body for _, body in frames] == [big] * sent + [b"last 0", b"last 1", b"last 2"]


async def test_closing_flushes_what_is_queued(router: zmq.asyncio.Socket) -> None:
    async with asyncio.timeout(TIMEOUT):
        dealer = await Dealer.connect(_endpoint(router), IDENTITY, LIMIT)
        for i in range(50):
            await dealer.send(b"%d" % i + b"." * 100_000)  # the last ones still queued ...
        await dealer.aclose(5.0)  # ... when the close comes
        for i in range(50):
            assert (await router.recv_multipart())[1].startswith(b"%d." % i)


async def test_nobody_at_the_endpoint_is_an_os_error(tmp_path: Path) -> None:
    async with asyncio.timeout(TIMEOUT):
        with pytest.raises(OSError):
            await Dealer.connect(f"ipc://{tmp_path}/nobody.sock", IDENTITY, LIMIT)
        with pytest.raises(ConnectionError, match="not an ipc"):
            await Dealer.connect("tcp://127.0.0.1:1", IDENTITY, LIMIT)


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def fake_router(tmp_path: Path, script: Script) -> AsyncIterator[str]:
    """A unix server at an endpoint that runs `script` on the connection after it read the
    dealer's greeting and READY."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            zmtp.check_greeting(await reader.readexactly(zmtp.GREETING_SIZE))
            await script(reader, writer)
        finally:
            writer.close()

    path = tmp_path / "fake.sock"
    server = await asyncio.start_unix_server(serve, path)
    try:
        yield f"ipc://{path}"
    finally:
        server.close()


HANDSHAKE = zmtp.GREETING + zmtp.ready(b"ROUTER")


def _then(data: bytes, *, close: bool = False) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        if close:
            writer.close()
        else:
            await reader.read()  # until the dealer closes

    return script


HOSTILE_HANDSHAKES = {
    "not zmtp": b"GET / HTTP/1.1\r\n" * 8,
    "zmtp 2": zmtp.GREETING[:10] + b"\x02" + zmtp.GREETING[11:],
    "plain mechanism": zmtp.GREETING[:12] + b"PLAIN".ljust(20, b"\x00") + zmtp.GREETING[32:],
    "no ready": zmtp.GREETING + zmtp.frame(b"hello"),
    "a pub socket": zmtp.GREETING + zmtp.ready(b"PUB"),
    "a truncated property": zmtp.GREETING + zmtp.command(b"READY", b"\x0bSocket-Type\x00\x00"),
    "reserved flags": zmtp.GREETING + b"\x80\x00",
    "closed mid-greeting": zmtp.GREETING[:30],
}


@pytest.mark.parametrize("reply", HOSTILE_HANDSHAKES.values(), ids=HOSTILE_HANDSHAKES.keys())
async def test_a_hostile_handshake_fails_the_connect(tmp_path: Path, reply: bytes) -> None:
    async with asyncio.timeout(TIMEOUT), fake_router(tmp_path, _then(reply, close=True)) as end:
        with pytest.raises(ConnectionError):
            await Dealer.connect(end, IDENTITY, LIMIT)


HOSTILE_STREAMS = {
    "over the frame limit": b"\x02" + (LIMIT + 1).to_bytes(8, "big"),
    "2^64-1 bytes announced": b"\x02" + b"\xff" * 8,
    "a message of two frames": zmtp.frame(b"a", zmtp.MORE) + zmtp.frame(b"b"),
    "an error command": zmtp.command(b"ERROR", b"\x03bad"),
    "a ping without its ttl": zmtp.command(b"PING", b""),
    "a truncated command": zmtp.frame(b"\x09PI", zmtp.COMMAND),
}


@pytest.mark.parametrize("stream", HOSTILE_STREAMS.values(), ids=HOSTILE_STREAMS.keys())
async def test_a_hostile_stream_ends_the_connection_after_the_good_frames(
    tmp_path: Path, stream: bytes
) -> None:
    good = zmtp.frame(b"one") + zmtp.frame(b"two")
    async with asyncio.timeout(TIMEOUT), fake_router(tmp_path, _then(HANDSHAKE)) as end:
        dealer = await Dealer.connect(end, IDENTITY, LIMIT)
        try:
            assert dealer._transport is not None
            dealer.data_received(good + stream)  # as if read in one piece
            assert await dealer.recv() == b"one"
            assert await dealer.recv() == b"two"
            with pytest.raises(ConnectionError):
                await dealer.recv()
            assert not dealer.send_nowait(b"after")  # dropped: the loss is recv's to report
            await dealer.send(b"after")
        finally:
            await dealer.aclose(1.0)


async def test_a_ping_is_answered_with_its_context_and_other_commands_skipped(
    tmp_path: Path,
) -> None:
    pong: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HANDSHAKE)
        await reader.readexactly(len(zmtp.ready(b"DEALER", IDENTITY)))
        writer.write(zmtp.command(b"SUBSCRIBE", b"x") + zmtp.command(b"PING", b"\x00\x10ctx"))
        writer.write(zmtp.frame(b"after the commands"))
        pong.set_result(await reader.readexactly(len(zmtp.command(b"PONG", b"ctx"))))
        await reader.read()

    async with asyncio.timeout(TIMEOUT), fake_router(tmp_path, script) as end:
        dealer = await Dealer.connect(end, IDENTITY, LIMIT)
        try:
            assert await dealer.recv() == b"after the commands"
            assert await pong == zmtp.command(b"PONG", b"ctx")
        finally:
            await dealer.aclose(1.0)


async def test_frames_received_before_the_peer_closed_are_still_taken(tmp_path: Path) -> None:
    frames = HANDSHAKE + b"".join(zmtp.frame(b"%d" % i) for i in range(RCVHWM + 10))
    async with asyncio.timeout(TIMEOUT), fake_router(tmp_path, _then(frames, close=True)) as end:
        dealer = await Dealer.connect(end, IDENTITY, LIMIT)
        try:
            for i in range(RCVHWM + 10):  # over RCVHWM: reading paused, then resumed
                assert await dealer.recv() == b"%d" % i
            with pytest.raises(ConnectionError, match="closed the connection"):
                await dealer.recv()
        finally:
            await dealer.aclose(1.0)
