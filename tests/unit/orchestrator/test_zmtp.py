"""The thin ZMTP DEALER: it talks to a real ZeroMQ ROUTER both ways, and a hostile or garbage
peer at the endpoint (a plain socket server here) gets a coded ZmtpError, never a hang or a
traceback of another type."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest
import zmq

from orchestrator.control import zmtp
from orchestrator.control.server import CONTROL_MAX_FRAME_BYTES
from orchestrator.control.zmtp import ZmtpDealer, ZmtpError
from protocol import zmtp as framing

ROUTER_READY = framing.ready(b"ROUTER")
HELLO = zmtp.GREETING + ROUTER_READY


@pytest.fixture
def sock_dir() -> Iterator[str]:
    # AF_UNIX paths are short (108 bytes): not under pytest's long tmp_path names
    path = tempfile.mkdtemp(prefix="zmtp-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def within(seconds: float) -> float:
    return time.monotonic() + seconds


def test_it_talks_to_a_zeromq_router(sock_dir: str) -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.RCVTIMEO, 10_000)
    path = os.path.join(sock_dir, "c.sock")
    router.bind(f"ipc://{path}")
    try:
        dealer = ZmtpDealer.connect(path, within(10), CONTROL_MAX_FRAME_BYTES)
        try:
            for payload in (b"hi", b"x" * 300, b"y" * (1 << 20)):  # short and long frames
                dealer.send(payload, within(10))
                peer, got = router.recv_multipart()
                assert got == payload
                router.send_multipart([peer, payload[::-1] + b"!"])
                assert dealer.recv(within(10)) == payload[::-1] + b"!"
        finally:
            dealer.close()
    finally:
        router.close()
        ctx.term()


class Hostile:
    """A listener that answers any connection with `script`, then reads until it is left."""

    def __init__(self, path: str, script: bytes, close: bool) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(1)
        self.script, self.close = script, close
        self.heard = bytearray()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.server.accept()
        # the client leaving mid-script (a refused greeting) is what these tests provoke
        with conn, contextlib.suppress(OSError):
            conn.settimeout(10)
            conn.sendall(self.script)
            if self.close:
                return
            while chunk := conn.recv(65536):
                self.heard += chunk

    def stop(self) -> None:
        self.thread.join(timeout=10)
        self.server.close()


def frame(data: bytes, flags: int = 0) -> bytes:
    return framing.frame(data, flags)


def exchange(path: str, wait: float) -> None:
    """Connect, send a request, read its reply, close: what a control call does."""
    dealer = ZmtpDealer.connect(path, within(wait), CONTROL_MAX_FRAME_BYTES)
    try:
        dealer.send(b"req", within(wait))
        dealer.recv(within(wait))
    finally:
        dealer.close()


GARBAGE = {
    "http": (b"HTTP/1.1 200 OK\r\n".ljust(64, b" "), zmtp.E_PROTOCOL_DECODE),
    "zmtp2": (zmtp.GREETING[:10] + b"\x02" + zmtp.GREETING[11:], zmtp.E_PROTOCOL_DECODE),
    "plain": (
        zmtp.GREETING[:12] + b"PLAIN".ljust(20, b"\x00") + zmtp.GREETING[32:],
        zmtp.E_PROTOCOL_DECODE,
    ),
    "no ready": (zmtp.GREETING + frame(b"hello"), zmtp.E_PROTOCOL_DECODE),
    "a pub": (
        zmtp.GREETING
        + framing.command(b"READY", b"\x0bSocket-Type" + struct.pack(">I", 3) + b"PUB"),
        zmtp.E_PROTOCOL_DECODE,
    ),
    "ready property past its end": (
        zmtp.GREETING + framing.command(b"READY", b"\x0bSocket-Type" + struct.pack(">I", 999)),
        zmtp.E_PROTOCOL_DECODE,
    ),
    "2^63 byte frame": (HELLO + b"\x02" + struct.pack(">Q", 1 << 63), zmtp.E_PROTOCOL_DECODE),
    "over the bound": (
        HELLO + b"\x02" + struct.pack(">Q", CONTROL_MAX_FRAME_BYTES + 1),
        zmtp.E_PROTOCOL_DECODE,
    ),
    "reserved flags": (HELLO + b"\x80\x01x", zmtp.E_PROTOCOL_DECODE),
    "two frames": (HELLO + frame(b"a", 0x01) + frame(b"b"), zmtp.E_PROTOCOL_DECODE),
    "error command": (HELLO + framing.command(b"ERROR", b"\x03bad"), zmtp.E_PROTOCOL_DECODE),
    "empty command": (HELLO + frame(b"", 0x04), zmtp.E_PROTOCOL_DECODE),
    "silent after its greeting": (zmtp.GREETING, zmtp.E_CONTROL_TIMEOUT),
    "silent after ready": (HELLO, zmtp.E_CONTROL_TIMEOUT),
    "truncated frame": (HELLO + b"\x00\x09abc", zmtp.E_CONTROL_TIMEOUT),
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_a_hostile_peer_is_a_coded_error(sock_dir: str, name: str) -> None:
    script, code = GARBAGE[name]
    # a silent peer's case waits out a short deadline; the others must fail long before theirs
    wait = 0.3 if code == zmtp.E_CONTROL_TIMEOUT else 30
    path = os.path.join(sock_dir, "h.sock")
    peer = Hostile(path, script, close=False)
    try:
        with pytest.raises(ZmtpError) as caught:
            exchange(path, wait)
        assert caught.value.code == code
    finally:
        peer.stop()


@pytest.mark.parametrize("script", [b"", zmtp.GREETING[:20], HELLO + b"\x00\x09abc"])
def test_a_peer_that_hangs_up_is_a_coded_error(sock_dir: str, script: bytes) -> None:
    path = os.path.join(sock_dir, "h.sock")
    peer = Hostile(path, script, close=True)
    try:
        with pytest.raises(ZmtpError) as caught:
            exchange(path, 5)
        assert caught.value.code == zmtp.E_DAEMON_NOT_RUNNING
    finally:
        peer.stop()


def test_a_ping_is_answered_and_the_reply_still_read(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "p.sock")
    ping = framing.command(b"PING", b"\x00\x0actx")
    peer = Hostile(path, HELLO + ping + frame(b"reply"), close=False)
    try:
        dealer = ZmtpDealer.connect(path, within(5), CONTROL_MAX_FRAME_BYTES)
        try:
            assert dealer.recv(within(5)) == b"reply"
        finally:
            dealer.close()
    finally:
        peer.stop()
    assert bytes(peer.heard) == zmtp.GREETING + zmtp.READY + framing.command(b"PONG", b"ctx")


def test_nobody_at_the_path(sock_dir: str) -> None:
    with pytest.raises(ZmtpError) as caught:
        ZmtpDealer.connect(os.path.join(sock_dir, "none.sock"), within(5), 1024)
    assert caught.value.code == zmtp.E_DAEMON_NOT_RUNNING
