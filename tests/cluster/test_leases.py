"""Partition leases on a real 3-server NATS cluster: one owner per partition, takeover after
a node's death, about a quarter moved when a 4th node joins, never two owners."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from structlog.testing import capture_logs

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.leases import LeaseKeeper, owners_of
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.names import plan
from orchestrator.cluster.options import options
from tests.cluster.natsd import NatsCluster

PARTITIONS = 24
TTL = 1.5


@dataclass
class Handler:
    """A partition handler that records what it was told."""

    got: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)

    async def gained(self, p: int) -> None:
        self.got.append(p)

    async def release(self, p: int) -> None:
        self.released.append(p)

    def lost(self, p: int) -> None:
        self.dropped.append(p)


@dataclass
class Node:
    name: str
    nats: Nats
    keeper: LeaseKeeper
    handler: Handler
    task: asyncio.Task[None] | None = None


async def start_node(cluster: NatsCluster, swarm: str, name: str) -> Node:
    policy = ClusterPolicy(partitions=PARTITIONS, lease_ttl_seconds=TTL, replicas=3)
    conn = await open_swarm(options(cluster.urls, name, None, policy), swarm, name)
    handler = Handler()
    keeper = LeaseKeeper(conn, name, PARTITIONS, TTL, handler)
    node = Node(name, conn, keeper, handler)
    node.task = asyncio.ensure_future(keeper.run())
    return node


async def stop(node: Node) -> None:
    assert node.task is not None
    node.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await node.task
    await node.nats.nc.close()


def overlap(nodes: list[Node]) -> set[int]:
    seen: set[int] = set()
    twice: set[int] = set()
    for node in nodes:
        for p in node.keeper.held:
            if node.keeper.holds(p):
                (twice if p in seen else seen).add(p)
    return twice


async def polled(done: Callable[[], bool]) -> None:
    """Until `done()` (leases change on timers: this looks every 50 ms; the caller bounds it)."""
    while True:
        if done():
            return
        await asyncio.sleep(0.05)


async def settle(nodes: list[Node]) -> dict[int, str]:
    """Until the live nodes hold the partitions the plan gives them, checking no partition is
    ever held by two of them on the way (leases change on timers: this looks every 50 ms)."""
    expect = plan(PARTITIONS, [n.name for n in nodes])
    while True:
        assert not overlap(nodes), "a partition had two owners"
        held = {p: n.name for n in nodes for p in n.keeper.held}
        if held == expect:
            return held
        await asyncio.sleep(0.05)


async def test_one_owner_per_partition_takeover_and_join(nats_cluster: NatsCluster) -> None:
    swarm = f"leases-{uuid.uuid4().hex[:6]}"
    nodes = [await start_node(nats_cluster, swarm, f"n{i}") for i in (1, 2, 3)]
    try:
        async with asyncio.timeout(30):
            held = await settle(nodes)
        assert set(held.values()) == {"n1", "n2", "n3"}
        assert await owners_of(nodes[0].nats, PARTITIONS) == held

        # a node dies without releasing: its leases expire and the others take them
        dead = nodes.pop(1)
        await stop(dead)
        async with asyncio.timeout(30):
            after = await settle(nodes)
        moved = {p for p, n in held.items() if n == "n2"}
        assert {p for p, n in after.items() if n != held[p]} == moved

        # a 4th node joins: only partitions they win move, to them, with a release
        for node in nodes:  # what they gave away while starting is not this step's
            node.handler.released.clear()
        nodes.append(await start_node(nats_cluster, swarm, "n4"))
        async with asyncio.timeout(30):
            joined = await settle(nodes)
        to_new = [p for p in range(PARTITIONS) if joined[p] != after[p]]
        assert all(joined[p] == "n4" for p in to_new)
        assert 2 <= len(to_new) <= PARTITIONS // 2
        released = nodes[0].handler.released + nodes[1].handler.released
        # only what moved to n4 is given away, once: a node whose read of the node records
        # missed n4 would take a freed partition back and release it again (it did under CI
        # load while nats-py's KeyValue.keys() dropped keys; kvkeys.py reads them all)
        assert sorted(released) == sorted(to_new)
        assert not nodes[0].handler.dropped and not nodes[1].handler.dropped
    finally:
        for node in nodes:
            await stop(node)


async def test_a_paused_node_drops_its_leases_before_acting(nats_cluster: NatsCluster) -> None:
    swarm = f"pause-{uuid.uuid4().hex[:6]}"
    node = await start_node(nats_cluster, swarm, "solo")
    try:
        async with asyncio.timeout(30):
            await settle([node])
        now = [node.keeper.clock()]
        node.keeper.clock = lambda: now[0] + 2 * TTL  # as if the process was stopped 2x TTL
        assert not any(node.keeper.holds(p) for p in range(PARTITIONS))
        node.keeper._drop_lapsed()
        assert sorted(node.handler.dropped) == list(range(PARTITIONS))
    finally:
        await stop(node)


async def test_a_release_whose_lease_moved_leaves_it_and_never_raises(
    nats_cluster: NatsCluster,
) -> None:
    """A stopping node whose lease key was written meanwhile (it lapsed and another node took
    it): the server refuses the conditional delete (10071, or 10164 on newer servers, which
    nats-py raises as a bare BadRequestError) and the node leaves that key alone."""
    swarm = f"moved-{uuid.uuid4().hex[:6]}"
    node = await start_node(nats_cluster, swarm, "solo")
    try:
        async with asyncio.timeout(30):
            await settle([node])
            assert node.task is not None
            node.task.cancel()  # no renewal may notice the move first
            with contextlib.suppress(asyncio.CancelledError):
                await node.task
            moved = node.nats.names.lease_key(0)
            await node.nats.leases.put(moved, b"n2")
            with capture_logs() as logs:
                await node.keeper.release_all()
            assert not node.keeper.held
            assert (await node.nats.leases.get(moved)).value == b"n2"
            owners = await owners_of(node.nats, PARTITIONS)
            assert owners == {0: "n2"}, owners
            released = [e for e in logs if e["event"] == "partition_released"]
            assert len(released) == PARTITIONS
            assert [e["partition"] for e in released if e.get("lease") == "moved"] == [0]
    finally:
        await stop(node)


async def test_leases_are_renewed_while_the_nodes_bucket_does_not_answer(
    nats_cluster: NatsCluster,
) -> None:
    """Renewals do not wait behind the beat: with the `nodes` bucket gone (as when a heal
    leaves its stream, or the meta leader a key listing needs, without an answer for
    seconds) every tick fails, and the node keeps every lease through several TTLs. Before,
    the renewals came after the beat in the tick and every lease lapsed (docs/cluster.md
    "Faults")."""
    swarm = f"beat-{uuid.uuid4().hex[:6]}"
    node = await start_node(nats_cluster, swarm, "solo")
    try:
        async with asyncio.timeout(30):
            await settle([node])
            with capture_logs() as logs:
                await node.nats.js.delete_stream(f"KV_{node.nats.names.bucket('nodes')}")
                failed_at = time.monotonic()
                while True:  # ticks fail every third of the TTL: three TTLs of them (polled)
                    failures = sum(line["event"] == "lease_tick_failed" for line in logs)
                    if failures >= 9 and time.monotonic() - failed_at > 3 * TTL:
                        break
                    await asyncio.sleep(0.1)
        assert not [line for line in logs if line["event"] == "lease_lapsed"]
        assert not node.handler.dropped
        assert all(node.keeper.holds(p) for p in range(PARTITIONS))
    finally:
        await stop(node)


async def test_after_an_outage_a_peer_missing_from_the_listing_keeps_its_share_a_ttl(
    nats_cluster: NatsCluster,
) -> None:
    """An outage of the `nodes` bucket (as of NATS's meta leader) let every record expire; the
    first node whose listing works again sees only itself. It plans with the peers live
    before the outage for a TTL more (a live one beats again meanwhile), then takes a dead
    one's share. Before, it took every partition at once and handed most back a tick later
    (docs/cluster.md "Faults")."""
    swarm = f"outage-{uuid.uuid4().hex[:6]}"
    a, b = [await start_node(nats_cluster, swarm, name) for name in ("a", "b")]
    try:
        async with asyncio.timeout(30):
            await settle([a, b])
            theirs = set(b.keeper.held)
            await stop(b)  # silent through the outage: its leases lapse, its record goes
            bucket = a.nats.names.bucket("nodes")
            info = await a.nats.js.stream_info(f"KV_{bucket}")
            with capture_logs() as logs:
                await a.nats.js.delete_stream(f"KV_{bucket}")
                await polled(lambda: sum(ln["event"] == "lease_tick_failed" for ln in logs) >= 2)
                await a.nats.js.add_stream(info.config)  # back, empty
                await polled(lambda: theirs <= set(a.keeper.held))
        events = [line["event"] for line in logs]
        assert "absent_nodes_kept" in events
        kept = events.index("absent_nodes_kept")
        gained = [
            i for i, ln in enumerate(logs)
            if ln["event"] == "partition_gained" and ln["partition"] in theirs
        ]  # fmt: skip
        assert min(gained) > kept, "b's share was taken before the TTL b had to beat again"
        assert all(line["nodes"] == ["b"] for line in logs if line["event"] == "absent_nodes_kept")
    finally:
        await stop(a)
