"""A bucket's keys are all there while the bucket is being written: the ownership plan, `cluster
status` and the restore of a dead node's deferred calls read every lease, node record or call,
and nats-py's `KeyValue.keys()` returned short lists under lease renewals."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from types import SimpleNamespace
from typing import Any

import msgspec
import nats.js.errors
import pytest

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.kvkeys import bucket_keys
from orchestrator.cluster.link import open_swarm
from orchestrator.cluster.options import options
from tests.cluster.natsd import NatsCluster

LEASES = 12


async def test_every_key_is_read_while_the_bucket_is_written(nats_cluster: NatsCluster) -> None:
    opts = options(nats_cluster.urls, "n1", None, ClusterPolicy(partitions=LEASES, replicas=3))
    async with asyncio.timeout(90):
        conn = await open_swarm(opts, f"keys{uuid.uuid4().hex[:8]}", "n1")
        try:
            for p in range(LEASES):
                await conn.leases.put(f"p.{p}", b"n1")
            await conn.leases.put("p.99", b"n2")
            await conn.leases.delete("p.99")  # a released lease: its marker is not a key

            async def renew() -> None:
                i = 0
                while True:
                    await conn.leases.put(f"p.{i % LEASES}", b"n1")
                    i += 1

            renewing = asyncio.create_task(renew())
            try:
                reads = [await conn.entries("leases") for _ in range(200)]
            finally:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
            expected = {f"p.{p}": b"n1" for p in range(LEASES)}
            assert all(read == expected for read in reads)

            await conn.calls.put("a.k1.c1", b"1")
            await conn.calls.put("a.k10.c2", b"2")
            await conn.calls.put("b.k1.c3", b"3")
            assert await conn.entries("calls", "a.k1.") == {"a.k1.c1": b"1"}
            assert set(await conn.entries("calls")) == {"a.k1.c1", "a.k10.c2", "b.k1.c3"}
            assert await conn.entries("nodes", "nobody.") == {}
            with pytest.raises(nats.js.errors.NotFoundError):
                await bucket_keys(conn.nc, f"missing{uuid.uuid4().hex[:8]}", 5.0)
        finally:
            await conn.close()


class PagingServer:
    """Answers stream info requests the way nats-server pages more subjects than one reply
    holds (sorted, `limit` per page, `total` of all): a bucket of 250k keys is not built here."""

    def __init__(self, subjects: list[str], limit: int) -> None:
        self.subjects = sorted(subjects)
        self.limit = limit
        self.offsets: list[int] = []

    async def request(self, subject: str, body: bytes, **_: float) -> Any:
        query = msgspec.json.decode(body)
        offset = query["offset"]
        self.offsets.append(offset)
        page = self.subjects[offset : offset + self.limit]
        reply = {"total": len(self.subjects), "offset": offset, "limit": self.limit,
                 "state": {"subjects": dict.fromkeys(page, 1)}}  # fmt: skip
        return SimpleNamespace(data=msgspec.json.encode(reply))


async def test_keys_past_one_page_are_read_page_by_page() -> None:
    subjects = [f"$KV.b.k{i:03d}" for i in range(250)]
    server = PagingServer(subjects, limit=100)
    async with asyncio.timeout(5):
        keys = await bucket_keys(server, "b", 5.0)  # type: ignore[arg-type]
    assert keys == [f"k{i:03d}" for i in range(250)]
    assert server.offsets == [0, 100, 200]
