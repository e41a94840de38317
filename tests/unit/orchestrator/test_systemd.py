"""sd_notify client against a real datagram socket bound by the test."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.systemd import (
    Notifier,
    monotonic_usec,
    socket_address,
    status_text,
    watchdog_loop,
)


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(5.0)
    yield sock, str(path)
    sock.close()


def _fields(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.split("\n"))


def test_without_notify_socket_every_call_is_a_noop() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog_interval() is None


def test_messages_arrive_as_key_value_lines(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
    try:
        assert notifier.ready("loaded")
        assert _fields(sock) == {"READY": "1", "STATUS": "loaded"}
        assert notifier.status("two lines\nbecome one")
        assert _fields(sock) == {"STATUS": "two lines become one"}
        before = monotonic_usec()
        assert notifier.reloading()
        got = _fields(sock)
        assert got["RELOADING"] == "1"
        assert int(got["MONOTONIC_USEC"]) >= before
        assert notifier.stopping()
        assert _fields(sock) == {"STOPPING": "1"}
        assert notifier.watchdog()
        assert _fields(sock) == {"WATCHDOG": "1"}
        assert notifier.extend_timeout(1.5)
        assert _fields(sock) == {"EXTEND_TIMEOUT_USEC": "1500000"}
    finally:
        notifier.close()


def test_abstract_socket_address() -> None:
    assert socket_address("@goondan/test") == b"\0goondan/test"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    name = f"goondan-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5.0)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
    try:
        assert notifier.ready()
        assert _fields(sock) == {"READY": "1"}
    finally:
        notifier.close()
        sock.close()


def test_missing_socket_is_reported_not_raised(tmp_path: Path) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    try:
        assert notifier.enabled
        assert notifier.ready() is False
    finally:
        notifier.close()


def test_unset_environment_removes_the_variables() -> None:
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "10", "WATCHDOG_PID": "1", "HOME": "/h"}
    notifier = Notifier.from_env(env, unset_environment=True)
    assert notifier.address == "/x"
    assert env == {"HOME": "/h"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": "/x", **env})
    assert notifier.watchdog_interval() == expected


async def test_watchdog_loop_pings_only_while_alive(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    sock.setblocking(False)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000"})
    alive = [False, False, True]
    probes = asyncio.Queue[bool]()

    def probe() -> bool:
        result = alive.pop(0) if alive else False
        probes.put_nowait(result)
        return result

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(watchdog_loop(notifier, probe))
    try:
        async with asyncio.timeout(5.0):
            answers = [await probes.get() for _ in range(3)]
            data = await loop.sock_recv(sock, 4096)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        notifier.close()
    assert answers == [False, False, True]
    assert data == b"WATCHDOG=1"
    with pytest.raises(BlockingIOError):
        sock.recv(4096)  # the two dead probes sent nothing


async def test_watchdog_loop_returns_when_the_watchdog_is_off() -> None:
    async with asyncio.timeout(5.0):
        await watchdog_loop(Notifier.from_env({}), lambda: True)
        await watchdog_loop(Notifier.from_env({"NOTIFY_SOCKET": "/x"}), lambda: True)


def test_status_text_counts_processes() -> None:
    assert status_text("hello", []) == "swarm hello: 0 processes"
    assert status_text("hello", ["idle"]) == "swarm hello: 1 process (1 idle)"
    text = status_text("s", ["idle", "processing", "idle"])
    assert text == "swarm s: 3 processes (2 idle, 1 processing)"


async def test_watchdog_loop_sends_status_when_it_changes(
    listener: tuple[socket.socket, str],
) -> None:
    sock, path = listener
    sock.setblocking(False)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000"})
    texts = ["a", "a", "b"]
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(
        watchdog_loop(notifier, lambda: True, status=lambda: texts.pop(0) if texts else "b")
    )
    try:
        async with asyncio.timeout(5.0):
            got = [await loop.sock_recv(sock, 4096) for _ in range(3)]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        notifier.close()
    assert got == [b"WATCHDOG=1\nSTATUS=a", b"WATCHDOG=1", b"WATCHDOG=1\nSTATUS=b"]


async def test_without_watchdog_the_loop_still_reports_status(
    listener: tuple[socket.socket, str],
) -> None:
    sock, path = listener
    sock.setblocking(False)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(watchdog_loop(notifier, lambda: True, status=lambda: "s"))
    try:
        async with asyncio.timeout(5.0):
            got = await loop.sock_recv(sock, 4096)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        notifier.close()
    assert got == b"STATUS=s"
