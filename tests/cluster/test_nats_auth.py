"""Cluster auth (README: Running on several machines): the NATS server of the tests has a user
per node with the permissions the README gives. A client without credentials is refused, and
so is a node started without them (`E_CLUSTER_INSECURE`, exit 2) unless `--insecure-nats`,
which it logs. With a user per node, node n2 cannot answer as n1 or in n1's place, read n1's
requests or replies, nor write or delete n1's record; a record naming n1 under n2's key does
not count; and the honest path (n2 forwards an answer to n1, which runs it) still works."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from bundles.kinds import ClusterPolicy
from orchestrator.calls.deferred_remote import Forward
from orchestrator.cluster.admin import cluster_status
from orchestrator.cluster.answers import Answers
from orchestrator.cluster.leases import NodeRecord, nodes_of
from orchestrator.cluster.link import Nats, inbox_prefix, open_swarm
from orchestrator.cluster.names import partition_of
from orchestrator.cluster.node_requests import NodeRequests
from orchestrator.cluster.options import PASSWORD_ENV, options
from tests.cluster.harness import StartDaemon, swarm_of, unique_swarm_bundle
from tests.cluster.natsd import ADMIN, NatsCluster, free_ports, nats_server_or_skip, with_user
from tests.integration.harness import run_cli

PARTITIONS = 4
LOCAL = "127.0.0.1"


class Raw:
    """A bare NATS client as `user`, with the errors the server sends it (a refused publish or
    subscription is an asynchronous error, the connection stays up)."""

    def __init__(self) -> None:
        self.errors: asyncio.Queue[Exception] = asyncio.Queue()
        self.nc = Client()

    async def on_error(self, exc: Exception) -> None:
        await self.errors.put(exc)

    async def connect(self, url: str, user: str | None) -> Raw:
        await self.nc.connect(
            with_user(url, user) if user else url, error_cb=self.on_error,
            inbox_prefix=inbox_prefix(user or "anon"), allow_reconnect=False,
            max_reconnect_attempts=0, connect_timeout=2,
        )  # fmt: skip
        return self

    async def refused(self) -> None:
        """Until the server has said no to what this client just sent."""
        await self.errors.get()


async def test_a_client_without_credentials_is_refused(nats_cluster: NatsCluster) -> None:
    url = nats_cluster.servers[0].plain_url
    async with asyncio.timeout(20):
        for user in (None, "intruder"):  # nobody, and a user the server does not have
            client = Raw()
            with pytest.raises((nats.errors.Error, OSError)):
                await client.connect(url, user)
            await client.nc.close()
        admin = await Raw().connect(url, ADMIN)  # the same server takes a user it has
        await admin.nc.close()


async def test_a_node_without_credentials_does_not_start(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    plain = ",".join(s.plain_url for s in nats_cluster.servers)
    async with asyncio.timeout(60):
        code, _, err = await run_cli(
            "run", str(bundle), "--no-entry-check", "--state-root", str(tmp_path / "n1"),
            "--cluster", plain, "--node", "n1",
        )  # fmt: skip
    assert code == 2, err
    assert "E_CLUSTER_INSECURE" in err and "--insecure-nats" in err


@pytest.fixture(scope="module")
def open_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One JetStream server without any authorization: its port."""
    binary = nats_server_or_skip()
    root = tmp_path_factory.mktemp("opennats")
    [port] = free_ports(1)
    proc = subprocess.Popen(
        [binary, "-a", LOCAL, "-p", str(port), "-js", "-sd", str(root / "store")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_with_insecure_nats_a_node_runs_without_credentials_and_says_so(
    start_daemon: StartDaemon, open_nats: int, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    yaml = bundle / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("replicas: 3", "replicas: 1"))
    async with asyncio.timeout(60):
        node = await start_daemon(
            bundle, swarm=swarm_of(bundle), state_root=tmp_path / "n1",
            args=("--cluster", f"nats://{LOCAL}:{open_nats}", "--node", "n1", "--insecure-nats"),
        )  # fmt: skip
        await node.wait_for("cluster_settled")
        reply = await node.send("open", key="k1")
    assert reply.ok, reply.error
    [warned] = node.find("nats_insecure", node="n1")
    assert warned["level"] == "warning"


async def as_node(url: str, node: str, swarm: str) -> Nats:
    """The node's own link to NATS (its own user), as `goondan run --cluster` opens it."""
    policy = ClusterPolicy(partitions=PARTITIONS, replicas=3)
    return await open_swarm(options(with_user(url, node), node, None, policy), swarm, node)


def lease_partition() -> int:
    """The partition of the instance the forwarded answers are for."""
    return partition_of("worker", "k1", PARTITIONS)


def forward(call_id: str) -> Forward:
    return Forward(call_id=call_id, agent="worker", instance_key="k1", wait_s=1.0, via="cli",
                   approve=True, by="ops")  # fmt: skip


def record(node: str) -> bytes:
    now = time.time()
    return msgspec.json.encode(NodeRecord(node=node, host="h", pid=1, started_at=now,
                                          beat_at=now))  # fmt: skip


async def test_a_node_cannot_act_as_another(nats_cluster: NatsCluster) -> None:
    # one server for every client: what it refuses it refuses before it routes anything on
    url = nats_cluster.servers[0].plain_url
    swarm = f"auth{uuid.uuid4().hex[:8]}"
    async with asyncio.timeout(60):
        n1 = await as_node(url, "n1", swarm)
        n2 = await as_node(url, "n2", swarm)
        raw = await Raw().connect(url, "n2")  # n2's user, used as an attacker would
        asked: list[Forward] = []

        async def handle(given: Forward) -> Any:
            asked.append(given)
            return {"resolved": given.call_id}

        holder = Answers(NodeRequests(n1, "n1"), PARTITIONS, lambda _a: True, 5.0)
        asker = Answers(NodeRequests(n2, "n2"), PARTITIONS, lambda _a: False, 2.0)
        try:
            await holder.serve(handle)
            lease = n1.names.lease_key(lease_partition())
            await n1.leases.put(lease, b"n1")
            spies = await _cannot_pose_as_n1(raw, n1)
            # the honest path: n2 forwards an answer to n1, which runs it and replies
            assert await asker.forward(forward("honest")) == {"resolved": "honest"}
            assert [f.call_id for f in asked] == ["honest"]  # no forged answer reached n1
            await n1.leases.put(lease, b"n1")  # its acknowledgement comes to n1's inbox
            await raw.nc.flush()
            assert [sub.pending_msgs for sub in spies] == [0, 0]  # it saw neither request nor reply
            await _cannot_register_as_n1(raw, n1)
        finally:
            await holder.requests.close()
            await asker.requests.close()
            await raw.nc.close()
            await n1.close()
            await n2.close()


async def _cannot_pose_as_n1(raw: Raw, n1: Nats) -> list[Subscription]:
    names = n1.names
    data = msgspec.json.encode(forward("forged"))
    # an answer that says it comes from n1 (or from n3), sent to n1 or to n2 itself
    for subject in (names.node_subject("n1", "answer", "n1"),
                    names.node_subject("n1", "answer", "n3"),
                    names.node_subject("n2", "answer", "n1")):  # fmt: skip
        await raw.nc.publish(subject, data)
        await raw.refused()
    # n1's requests and the replies n1 waits for are not n2's to read
    spies = []
    for subject in (names.node_requests("n1", "answer"), f"{inbox_prefix('n1')}.>"):
        spies.append(await raw.nc.subscribe(subject))
        await raw.refused()
    return spies


async def _cannot_register_as_n1(raw: Raw, n1: Nats) -> None:
    kv = await raw.nc.jetstream(timeout=1).key_value(n1.names.bucket("nodes"))
    for write in (kv.put("n1", record("n1")), kv.delete("n1")):
        with pytest.raises(nats.errors.Error):  # refused: the store never acknowledges it
            await write
        await raw.refused()
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await n1.nodes.get("n1")
    # n2 may write its own key, but a record there that names n1 does not make n1 a node
    await kv.put("n2", record("n1"))
    assert [r.node for r in await nodes_of(n1)] == []
    # keys of shapes n2 may write in the leases bucket that are no lease break no status
    leases = await raw.nc.jetstream(timeout=1).key_value(n1.names.bucket("leases"))
    for key in ("n2", "p.x", "p.999", "a.b.c"):
        await leases.put(key, b"\xff")
    status = await cluster_status(n1, PARTITIONS)
    assert status["unowned"] == [p for p in range(PARTITIONS) if p != lease_partition()]


async def test_the_printed_nats_config_runs_a_node_and_refuses_anonymous_clients(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """`goondan cluster nats-config` is the server config of the README: nats-server takes it,
    a node connects with the password it wrote for it (--nats-user and the environment
    variable, never argv), a client without credentials is refused."""
    passwords = tmp_path / "passwords"
    code, config, err = await run_cli("cluster", "nats-config", "n1", "n2", "--admin", "ops",
                                      "--env-dir", str(passwords))  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in passwords.iterdir()) == ["n1.env", "n2.env", "ops.env"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in passwords.iterdir())
    name, n1_password = (passwords / "n1.env").read_text().strip().split("=", 1)
    assert name == PASSWORD_ENV and n1_password not in err
    (tmp_path / "auth.conf").write_text(config)
    [port] = free_ports(1)
    server = await asyncio.create_subprocess_exec(
        nats_server_or_skip(), "-a", LOCAL, "-p", str(port), "-js", "-sd", str(tmp_path / "js"),
        "-c", str(tmp_path / "auth.conf"), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    bundle = unique_swarm_bundle(tmp_path)
    yaml = bundle / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("replicas: 3", "replicas: 1"))
    try:
        async with asyncio.timeout(60):
            node = await start_daemon(
                bundle, swarm=swarm_of(bundle), state_root=tmp_path / "n1",
                args=("--cluster", f"nats://{LOCAL}:{port}", "--node", "n1", "--nats-user", "n1"),
                env={PASSWORD_ENV: n1_password},  # the password out of argv
            )  # fmt: skip
            await node.wait_for("cluster_settled")
            assert (await node.send("with its own user", key="k1")).ok
            assert not node.find("nats_insecure")
            anonymous = Raw()
            with pytest.raises((nats.errors.Error, OSError)):
                await anonymous.connect(f"nats://{LOCAL}:{port}", None)
            await anonymous.nc.close()
    finally:
        server.kill()
        await server.wait()
