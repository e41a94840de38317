"""A node that starts while the NATS cluster is still gathering its peers: JetStream refuses a
replicated stream until enough servers joined, and the node waits (bounded) instead of exiting."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bundles.kinds import ClusterPolicy
from orchestrator.cluster import link
from orchestrator.cluster.link import ClusterUnavailable, open_swarm
from orchestrator.cluster.options import options
from protocol.errors import ErrorCode
from tests.cluster.natsd import NatsCluster, nats_server_or_skip


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
        await cluster.wait_ready()
        # Two servers cannot hold three replicas: the node retries, logs why, then gives up
        # with the coded error once its patience is spent.
        monkeypatch.setattr(link, "PREPARE_PATIENCE", 1.5)
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
