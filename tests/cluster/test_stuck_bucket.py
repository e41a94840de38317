"""The `nodes` and `leases` buckets stuck without a leader after a whole-cluster outage are made
again (orchestrator/cluster/stuck_bucket.py; docs/cluster.md "Faults"). The fault suite's power
cut of every server left each replica of a bucket's stream with a store behind its own Raft
snapshot; here every server is stopped (each snapshots its groups, the node's record or leases
live in them) and each store loses the stream's files, which leaves the stream in the same
state: every server logs `catchup aborted, no leader for stream` and none ever leads it. A
module of its own: it stops its NATS cluster's servers."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats.errors

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.leases import LeaseKeeper, nodes_of
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.options import options
from orchestrator.cluster.stuck_bucket import Bucket, StuckBucket, stream_verdict
from tests.cluster.natsd import NatsCluster
from tests.cluster.test_leases import Handler

PARTITIONS = 4
TTL = 1.5
LEADERLESS_FOR = 2.0
"""Shorter than a node's (10 s): the stream here stays leaderless for good, and the test is
about what is done then."""


@dataclass
class Keeper:
    """One node's lease keeper running on a swarm of its own, told of `what`'s writes."""

    conn: Nats
    stuck: StuckBucket
    keeper: LeaseKeeper
    handler: Handler
    stream: str


@contextlib.asynccontextmanager
async def _keeper(nats_cluster: NatsCluster, what: Bucket) -> AsyncIterator[Keeper]:
    policy = ClusterPolicy(partitions=PARTITIONS, lease_ttl_seconds=TTL, replicas=3)
    swarm = f"stuck-{uuid.uuid4().hex[:6]}"
    conn = await open_swarm(options(nats_cluster.urls, "n1", None, policy), swarm, "n1")
    stuck = StuckBucket(conn, what, TTL, replicas=3, leaderless_for=LEADERLESS_FOR)
    handler = Handler()
    keeper = LeaseKeeper(
        conn, "n1", PARTITIONS, TTL, handler,
        nodes_stuck=stuck if what == "nodes" else None,
        leases_stuck=stuck if what == "leases" else None,
    )  # fmt: skip
    task = asyncio.ensure_future(keeper.run())
    try:
        yield Keeper(conn, stuck, keeper, handler, f"KV_{conn.names.bucket(what)}")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await conn.nc.close()


async def test_a_nodes_bucket_left_without_a_leader_is_made_again(
    nats_cluster: NatsCluster,
) -> None:
    async with _keeper(nats_cluster, "nodes") as node, asyncio.timeout(90):
        await _until_beaten_into(node.conn, node.stream)
        await _lose_every_copy(nats_cluster, node.stream)
        await _until_beaten_into(node.conn, node.stream)  # before the fix: never (leaderless)
    assert node.stuck.rebuilds >= 1


async def test_a_leases_bucket_left_without_a_leader_is_made_again_a_ttl_after_it_is_gone(
    nats_cluster: NatsCluster,
) -> None:
    async with _keeper(nats_cluster, "leases") as node, asyncio.timeout(90):
        await _until_holding_all(node.conn, node.keeper, node.stream)
        await _lose_every_copy(nats_cluster, node.stream)
        await _until_holding_all(node.conn, node.keeper, node.stream)  # before the fix: never
    assert node.stuck.rebuilds >= 1
    assert sorted(set(node.handler.dropped)) == list(range(PARTITIONS))  # lapsed meanwhile
    assert node.handler.got.count(0) >= 2  # and taken again from the new bucket


async def _lose_every_copy(nats_cluster: NatsCluster, stream: str) -> None:
    for server in nats_cluster.servers:
        nats_cluster.stop(server)
    for server in nats_cluster.servers:
        shutil.rmtree(server.store / "jetstream" / "$G" / "streams" / stream / "msgs")
    for server in nats_cluster.servers:
        nats_cluster.start(server)
    await nats_cluster.wait_ready()


async def _until_holding_all(conn: Nats, keeper: LeaseKeeper, stream: str) -> None:
    """Until the leases' stream has a leader and the node holds every partition (polled, the
    caller bounds it)."""
    while True:
        try:
            led = await stream_verdict(conn, stream) == "led"
            if led and sorted(p for p in range(PARTITIONS) if keeper.holds(p)) == list(
                range(PARTITIONS)
            ):
                return
        except (nats.errors.Error, TimeoutError):
            pass  # no answer while the servers restart and elect
        await asyncio.sleep(0.2)


async def _until_beaten_into(conn: Nats, stream: str) -> None:
    """Until the bucket's stream has a leader and holds the node's record (polled: nothing to
    await in NATS; the caller bounds it)."""
    while True:
        try:
            led = await stream_verdict(conn, stream) == "led"
            if led and [r.node for r in await nodes_of(conn)] == ["n1"]:
                return
        except (nats.errors.Error, TimeoutError):
            pass  # no answer while the servers restart and elect
        await asyncio.sleep(0.2)
