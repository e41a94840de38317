"""`goondan run` under a NOTIFY_SOCKET the test binds: READY, STATUS, WATCHDOG, STOPPING in order.

Also: a daemon whose run dir is systemd's RUNTIME_DIRECTORY is found by a CLI that does not
have that variable (through the `<state_root>/run/<swarm>.json` pointer).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path

from protocol.control import Restart
from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli


class NotifySocket:
    """The systemd side: a datagram socket whose messages are `KEY=value` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.seen: list[dict[str, str]] = []

    async def next(self) -> dict[str, str]:
        data = await asyncio.get_running_loop().sock_recv(self.sock, 4096)
        fields = dict(line.split("=", 1) for line in data.decode().splitlines())
        self.seen.append(fields)
        return fields

    async def until(self, key: str) -> dict[str, str]:
        while True:
            fields = await self.next()
            if key in fields:
                return fields

    def close(self) -> None:
        self.sock.close()


async def test_ready_status_watchdog_stopping_in_order(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    notify = NotifySocket(tmp_path / "notify")
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000"}
    try:
        async with asyncio.timeout(30):
            daemon = await start_daemon(env=env)
            ready = await notify.until("READY")
            assert ready["READY"] == "1"
            assert ready["STATUS"].startswith("swarm probe:")
            watchdog = await notify.until("WATCHDOG")
            assert watchdog["WATCHDOG"] == "1"
            # a second ping: the watchdog keeps going while the broker runs
            await notify.until("WATCHDOG")
            daemon.signal(signal.SIGTERM)
            stopping = await notify.until("STOPPING")
            assert stopping["STOPPING"] == "1"
            assert await daemon.wait() == 0
    finally:
        notify.close()
    keys = [k for fields in notify.seen for k in fields if k in ("READY", "WATCHDOG", "STOPPING")]
    assert keys[0] == "READY" and keys[-1] == "STOPPING"
    assert "WATCHDOG" in keys and keys.index("WATCHDOG") > 0


async def test_agents_do_not_inherit_notify_socket(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    notify = NotifySocket(tmp_path / "notify")
    try:
        async with asyncio.timeout(30):
            # cold spawns exec a fresh environment, which /proc/<pid>/environ shows (a forked
            # child's /proc view is its parent's exec-time block, whatever unsetenv did)
            env = {"NOTIFY_SOCKET": str(notify.path), "GOONDAN_SPAWN_MODE": "cold"}
            daemon = await start_daemon(env=env)
            reply = await daemon.send("hello")
            assert reply.ok, reply.error
            children = daemon.descendants()
            assert children
            for child in children:
                assert "NOTIFY_SOCKET" not in child.environ()
    finally:
        notify.close()


async def test_cli_finds_a_daemon_in_runtime_directory(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    runtime = Path(os.environ["GOONDAN_STATE_ROOT"]) / "rt"
    async with asyncio.timeout(30):
        daemon = await start_daemon(env={"RUNTIME_DIRECTORY": str(runtime)})
        assert (runtime / "probe" / "active.json").is_file()
        pointer = StateLayout.from_env().root / "run" / "probe.json"
        assert pointer.is_file()
        code, out, err = await run_cli("status")
        assert code == 0, err
        assert "probe" in out
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
    assert not pointer.exists()


async def test_restart_is_reloading_then_ready(start_daemon: StartDaemon, tmp_path: Path) -> None:
    notify = NotifySocket(tmp_path / "notify")
    try:
        async with asyncio.timeout(30):
            daemon = await start_daemon(env={"NOTIFY_SOCKET": str(notify.path)})
            await notify.until("READY")
            reply = await daemon.send("hello")
            assert reply.ok, reply.error
            restarted = await daemon.request(Restart(request_id="r", agent="alpha"))
            assert restarted.ok, restarted.error
            reloading = await notify.until("RELOADING")
            assert int(reloading["MONOTONIC_USEC"]) > 0
            ready = await notify.until("READY")
            assert ready["STATUS"].startswith("swarm probe:")
    finally:
        notify.close()
