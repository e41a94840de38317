"""Expired deferred calls leave the swarm's `calls` bucket: an agent fails an expired call in
its own directory and tells no node, so without the sweep the bucket would keep it for good."""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import nats.js.errors
import pytest

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.calls import SWEEP_GRACE, CallMirror, call_key
from orchestrator.cluster.link import open_swarm
from orchestrator.cluster.options import options
from protocol.jsonrpc import PendingCall
from tests.cluster.natsd import NatsCluster


def call(call_id: str, expires_at: float) -> PendingCall:
    return PendingCall(id=call_id, method="ui.confirm", agent="worker", instance_key="k",
                       tool_name="client__ask", turn_id="t", created_at=expires_at - 60,
                       expires_at=expires_at)  # fmt: skip


async def test_calls_expired_past_the_grace_are_swept_and_the_others_kept(
    nats_cluster: NatsCluster,
) -> None:
    opts = options(nats_cluster.urls, "n1", None, ClusterPolicy(partitions=8, replicas=3))
    async with asyncio.timeout(60):
        conn = await open_swarm(opts, f"sweep{uuid.uuid4().hex[:8]}", "n1")
        try:
            now = time.time()
            calls = {
                "old": call("old", now - SWEEP_GRACE - 1),  # expired long ago: swept
                "recent": call("recent", now - 1),  # just expired: its owner may restore it
                "live": call("live", now + 3600),
            }
            for c in calls.values():
                await conn.calls.put(call_key(c.agent, c.instance_key, c.id),
                                     msgspec.json.encode(c))  # fmt: skip
            await conn.calls.put("worker.k.garbage", b"not a call")  # reported, kept
            mirror = CallMirror(conn)
            assert await mirror.sweep(now) == 1
            assert await mirror.sweep(now) == 0  # idempotent
            left = set(await conn.entries("calls"))
            assert left == {call_key("worker", "k", i) for i in ("recent", "live")} | {
                "worker.k.garbage"
            }
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await conn.calls.get(call_key("worker", "k", "old"))
            await mirror.close()
        finally:
            await conn.close()
