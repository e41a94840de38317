"""The fault suite's cluster: the 3 NATS servers of `tests/cluster/natsd.py` and 3 goondan
nodes, each in its own namespace of a `Net` (so a fault can cut one off). JetStream writes
with `sync_interval: always`, so an acknowledged append is on disk before a kill; where the
machine can (`power.unavailable`), each server's store is an ext4 image whose power can be
cut (tests/faults/power.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.harness import swarm_of
from tests.cluster.natsd import NatsCluster, Server, authorization, with_user
from tests.faults import clock, power
from tests.faults.netns import Net
from tests.integration.harness import PYTHON, Daemon, child_env

NATS_PORT, ROUTE_PORT = 4222, 6222
SYNC = "" if os.environ.get("FAULT_NATS_SYNC") == "default" else ", sync_interval: always"
"""FAULT_NATS_SYNC=default runs JetStream's default (a flush every 2 minutes) to show what
`sync_interval: always` buys: the power cuts then lose acknowledged sends."""


@dataclass
class NsServer(Server):
    address: str = "127.0.0.1"

    @property
    def plain_url(self) -> str:
        return f"nats://{self.address}:{self.port}"


class NsNatsCluster(NatsCluster):
    net: Net
    powered: bool
    """Whether each server's store is an ext4 image (`power.cut` works on it)."""

    @classmethod
    def in_net(
        cls, binary: str, root: Path, net: Net, size: int = 3, powered: bool = False
    ) -> NsNatsCluster:
        cluster = cls(binary, root)
        cluster.net, cluster.powered = net, powered
        for i in range(size):
            name = f"s{i + 1}"
            address = net.add(name)
            cluster.servers.append(NsServer(name, NATS_PORT, ROUTE_PORT, root / name,
                                            root / f"{name}.log", address=address))  # fmt: skip
            if powered:
                power.make_store(root / name)
        return cluster

    def server_config(self, server: Server) -> Path:
        path = self.root / f"{server.name}.conf"
        path.write_text(f'{authorization()}\njetstream {{ store_dir: "{server.store}"{SYNC} }}\n')
        return path

    def start(self, server: Server) -> None:
        assert isinstance(server, NsServer)
        routes = ",".join(f"nats://{s.address}:{ROUTE_PORT}"  # type: ignore[attr-defined]
                          for s in self.servers)  # fmt: skip
        args = [
            *self.net.exec_prefix(server.name), self.binary, "-a", server.address,
            "-p", str(NATS_PORT), "-n", server.name, "-c", str(self.server_config(server)),
            "--cluster_name", "goondan-faults",
            "--cluster", f"nats://{server.address}:{ROUTE_PORT}", "--routes", routes,
        ]  # fmt: skip
        if self.powered:
            args = power.mounted(server.store, args)
        with server.log.open("ab") as out:
            server.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    async def restart(self, server: Server) -> None:
        """Start a killed server again on its store (its image mounted anew: a reboot)."""
        if self.powered:
            await power.released(server.store)
        self.start(server)

    def power_cut(self, *servers: Server) -> None:
        """Their disks keep only what was synced, then they die (`power.cut`): every disk is
        cut before any process is killed, so none of them acknowledges anything in between."""
        for server in servers:
            assert self.powered and server.proc is not None
            power.cut(server.proc.pid, server.store)
        for server in servers:
            self.kill(server)

    def urls_as(self, user: str) -> str:
        return ",".join(with_user(s.plain_url, user) for s in self.servers)


async def start_ns_node(net: Net, nats: NatsCluster, bundle: Path, name: str, root: Path) -> Daemon:
    """`goondan run --cluster ... --node NAME` inside NAME's namespace; its control socket is
    a unix socket on the shared filesystem, so the tests reach it from the host. Its wall
    clock is one `clock.jump` can move (where libfaketime is installed)."""
    state_root = root / name
    state_root.mkdir(parents=True, exist_ok=True)
    env = child_env({"GOONDAN_STATE_ROOT": str(state_root), **clock.env(root, name)})
    proc = await asyncio.create_subprocess_exec(
        *net.exec_prefix(name), PYTHON, "-m", "orchestrator", "run", str(bundle),
        "--log-format", "json", "--no-entry-check", "--cluster", nats.urls_as(name),
        "--node", name, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    daemon = Daemon(proc, swarm_of(bundle), state_root)
    try:
        await daemon.wait_for("started")
    except BaseException:
        await daemon.close()
        raise
    return daemon
