"""A node that starts while the NATS cluster is still gathering its peers: JetStream refuses a
replicated stream until enough servers joined, and the node waits (bounded) instead of exiting.
A node that cannot reach NATS at all gives up (bounded) with the coded error, says why once per
kind of trouble, and stops at once when asked to while it waits."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bundles.kinds import ClusterPolicy
from orchestrator.cluster import link
from orchestrator.cluster.link import ClusterUnavailable, open_swarm
from orchestrator.cluster.options import options
from protocol.errors import ErrorCode
from tests.cluster.harness import unique_swarm_bundle
from tests.cluster.natsd import NatsCluster, free_ports, nats_server_or_skip
from tests.integration.harness import PYTHON, child_env


@pytest.fixture
def two_of_three(tmp_path: Path) -> Iterator[NatsCluster]:
    """A 3-server cluster with only two servers up (the third is started by the test)."""
    cluster = NatsCluster.create(nats_server_or_skip(), tmp_path)
    for server in cluster.servers[:2]:
        cluster.start(server)
    try:
        yield cluster
    finally:
        cluster.stop_all()


async def test_a_starting_node_waits_for_the_peers_its_streams_need(
    two_of_three: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = two_of_three
    policy = ClusterPolicy(partitions=8, replicas=3)
    opts = options(cluster.urls, "n1", None, policy)
    async with asyncio.timeout(90):
        await cluster.wait_listening()
        # Two servers of a fresh cluster elect no meta leader (and could not hold three
        # replicas): the node retries, logs why, then gives up with the coded error once its
        # patience is spent.
        monkeypatch.setattr(link, "PREPARE_PATIENCE", 1.5)
        # JetStream without a meta leader does not answer at all (older servers said 503)
        monkeypatch.setattr(link, "API_TIMEOUT", 0.3)
        with capture_logs() as logs, pytest.raises(ClusterUnavailable) as refused:
            await open_swarm(opts, "startwait", "n1")
        assert refused.value.code == ErrorCode.E_CLUSTER_UNAVAILABLE
        waits = [entry for entry in logs if entry["event"] == "cluster_waiting"]
        assert len(waits) >= 2, logs
        assert all(entry["log_level"] == "warning" for entry in waits)

        # With the third server up (and the default patience) the same node gets its streams.
        monkeypatch.undo()
        cluster.start(cluster.servers[2])
        conn = await open_swarm(opts, "startwait", "n1")
        try:
            info = await conn.js.stream_info(conn.names.ingress_stream)
            assert info.config.num_replicas == 3
        finally:
            await conn.close()


async def test_a_node_that_cannot_reach_nats_gives_up_with_the_coded_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [port] = free_ports(1)  # nothing listens there
    opts = options(f"nats://n1:pw@127.0.0.1:{port}", "n1", None, ClusterPolicy(partitions=8))
    monkeypatch.setattr(link, "CONNECT_PATIENCE", 1.5)
    async with asyncio.timeout(30):
        with capture_logs() as logs, pytest.raises(ClusterUnavailable) as refused:
            await open_swarm(opts, "unreachable", "n1")
    assert refused.value.code == ErrorCode.E_CLUSTER_UNAVAILABLE
    assert str(port) in refused.value.message
    # nats-py calls back on every retry (each 0.25 s): the log says it once per kind
    troubles = [entry["error"] for entry in logs if entry["event"] == "nats_error"]
    assert troubles and len(troubles) == len(set(troubles)), logs


async def test_a_node_waiting_for_nats_at_its_start_stops_when_asked(tmp_path: Path) -> None:
    [port] = free_ports(1)
    bundle = unique_swarm_bundle(tmp_path)
    env = child_env()  # the test's own state root, short enough for its sockets' paths
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "orchestrator", "run", str(bundle), "--no-entry-check",
        "--log-format", "json", "--cluster", f"nats://127.0.0.1:{port}", "--node", "n1",
        "--insecure-nats",
        env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    events: list[str] = []
    try:
        async with asyncio.timeout(30):
            async for raw in proc.stderr:  # it is waiting once it said why
                events.append(json.loads(raw).get("event", ""))
                if events[-1] == "nats_error":
                    break
            proc.send_signal(signal.SIGTERM)
            events += [json.loads(raw).get("event", "") async for raw in proc.stderr]
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert "start_interrupted" in events and "cluster_unavailable" not in events, events
    assert "nats_insecure" in events  # the node without credentials says so at its start
    assert code == 1
