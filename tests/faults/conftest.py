"""Fault-suite fixtures: a run's namespaces (deleted whatever happens, and a crashed run's
leftovers first), its NATS cluster in them, and the integration fixtures' failure logs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.natsd import nats_server_or_skip
from tests.faults import netns, power
from tests.faults.cluster import NsNatsCluster


@pytest.fixture
def net() -> Iterator[netns.Net]:
    reason = netns.unavailable()
    if reason is not None:  # not a failure even under CI: the machine cannot run it at all
        pytest.skip(reason)
    netns.sweep()
    made = netns.Net()
    try:
        made.create()
        yield made
    finally:
        made.destroy()


@pytest.fixture
def ns_nats(net: netns.Net, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsNatsCluster]:
    binary = nats_server_or_skip()
    root = tmp_path_factory.mktemp("nats")
    cluster = NsNatsCluster.in_net(binary, root, net, powered=power.unavailable() is None)
    for name in ("n1", "n2", "n3"):
        net.add(name)
    try:
        cluster.start_all()
        yield cluster
    finally:
        for server in cluster.servers:  # a paused server ignores SIGKILL only until SIGCONT
            if server.proc is not None and server.proc.poll() is None:
                server.proc.send_signal(18)
        cluster.stop_all()


from tests.integration.conftest import (  # noqa: E402  a failed test prints its daemons' logs
    pytest_runtest_makereport as pytest_runtest_makereport,
)
