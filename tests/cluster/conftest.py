"""Cluster fixtures: one 3-server NATS cluster per test module (tests use their own swarm
names, so they share it), and the integration fixture that always cleans daemons up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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


from tests.integration.conftest import (  # noqa: E402  a failed test prints its daemons' logs
    pytest_runtest_makereport as pytest_runtest_makereport,
)
