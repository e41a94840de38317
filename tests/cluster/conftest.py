"""Cluster fixtures: one 3-server NATS cluster per test module (tests use their own swarm
names, so they share it), three nodes of a swarm of its own per test, and the integration
fixture that always cleans daemons up."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import (
    FreshSwarm,
    StartDaemon,
    start_nodes,
    swarm_of,
    unique_swarm_bundle,
)
from tests.cluster.natsd import NatsCluster, nats_server_or_skip
from tests.integration.conftest import start_daemon as start_daemon


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    binary = nats_server_or_skip()
    cluster = NatsCluster.create(binary, tmp_path_factory.mktemp("nats"))
    cluster.start_all()
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture
async def fresh(start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path) -> FreshSwarm:
    """Three nodes of a swarm of its own, each settled (it owns its share of the partitions)."""
    bundle = unique_swarm_bundle(tmp_path)
    async with asyncio.timeout(60):
        nodes = await start_nodes(start_daemon, nats_cluster, bundle, tmp_path)
    return FreshSwarm(bundle, swarm_of(bundle), nodes)


from tests.integration.conftest import (  # noqa: E402  a failed test prints its daemons' logs
    pytest_runtest_makereport as pytest_runtest_makereport,
)
