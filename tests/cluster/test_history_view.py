"""`instance show` on a cluster node reads an instance's events from the swarm's history stream:
every agent of the key, after the sequence the reader has, in replies of a bounded size that
say when more is left."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from bundles.kinds import ClusterPolicy
from orchestrator.cluster import history_view
from orchestrator.cluster.link import open_swarm
from orchestrator.cluster.options import options
from protocol.ids import agent_address
from tests.cluster.natsd import NatsCluster


async def test_events_come_per_agent_after_the_reader_and_in_bounded_replies(
    nats_cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = options(nats_cluster.urls, "n1", None, ClusterPolicy(partitions=4, replicas=3))
    async with asyncio.timeout(60):
        conn = await open_swarm(opts, f"view{uuid.uuid4().hex[:8]}", "n1")
        try:
            names = conn.names
            for agent, count in (("caller", 30), ("worker", 5), ("caller.x", 1)):
                for i in range(count):
                    line = f'{{"n": {i}, "agent": "{agent}"}}\n'.encode()
                    await conn.js.publish(names.history_subject(agent_address(agent, "k.1")), line)
            await conn.js.publish(names.history_subject(agent_address("caller", "k")), b"other\n")

            monkeypatch.setattr(history_view, "REPLY_BYTES", 200)  # a few lines per reply
            after: dict[str, int] = {}
            got: dict[str, list[str]] = {}
            replies = 0
            more = True
            while more:
                view = await history_view.instance_history(conn, "k.1", None, after)
                replies += 1
                more = False
                for agent, part in view["agents"].items():
                    got.setdefault(agent, []).extend(part["lines"])
                    after[agent] = part["lastSeq"]
                    more = more or part["more"]
            assert replies > 3
            assert sorted(got) == ["caller", "caller.x", "worker"]  # not instance "k"'s
            assert [line.split(",")[0] for line in got["caller"]] == [
                f'{{"n": {i}' for i in range(30)
            ]
            assert len(got["worker"]) == 5 and len(got["caller.x"]) == 1

            again = await history_view.instance_history(conn, "k.1", None, after)
            assert all(p["lines"] == [] and not p["more"] for p in again["agents"].values())
            one = await history_view.instance_history(conn, "k.1", "worker", {})
            assert list(one["agents"]) == ["worker"]
            with pytest.raises(history_view.NoHistory):
                await history_view.instance_history(conn, "nobody", None, {})
        finally:
            await conn.close()
