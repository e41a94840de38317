"""Forwarding an answer to the node that runs a call's instance (`answers.py`), on a real NATS
cluster: the holder's reply or coded error comes back; a holder that is handing the partition
over, or no holder at all, makes the asker retry and then say the call is still pending; a
garbage request on a node's subject is answered with a coded error and harms nothing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import pytest

from bundles.kinds import ClusterPolicy
from orchestrator.calls.deferred import DeferredCallError
from orchestrator.calls.deferred_remote import Forward
from orchestrator.cluster.answers import AnswerReply, Answers
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.names import partition_of
from orchestrator.cluster.node_requests import NodeRequests
from orchestrator.cluster.options import options
from protocol.errors import ErrorCode
from tests.cluster.natsd import NatsCluster

PARTITIONS = 8


def forward(call_id: str, key: str = "k1") -> Forward:
    return Forward(call_id=call_id, agent="worker", instance_key=key, wait_s=1.0, via="cli",
                   approve=True, by="ops")  # fmt: skip


async def hold(conn: Nats, key: str, node: str) -> None:
    p = partition_of("worker", key, PARTITIONS)
    await conn.leases.put(conn.names.lease_key(p), node.encode())


async def test_an_answer_reaches_the_holder_and_its_reply_comes_back(
    nats_cluster: NatsCluster,
) -> None:
    opts = options(nats_cluster.urls, "n1", None, ClusterPolicy(partitions=PARTITIONS, replicas=3))
    async with asyncio.timeout(60):
        conn = await open_swarm(opts, f"ans{uuid.uuid4().hex[:8]}", "n1")
        running = {"k1", "k2"}
        holder = Answers(
            NodeRequests(conn, "n1"), PARTITIONS, lambda a: a.instance_key in running, 5.0
        )
        asker = Answers(NodeRequests(conn, "n2"), PARTITIONS, lambda _a: False, 0.6)
        asked: list[Forward] = []

        async def handle(given: Forward) -> Any:
            asked.append(given)
            if given.call_id == "gone":
                raise DeferredCallError(ErrorCode.E_CALL_NOT_FOUND, "no pending call 'gone'")
            return {"resolved": given.call_id}

        try:
            await holder.serve(handle)
            await hold(conn, "k1", "n1")
            assert await asker.forward(forward("c1")) == {"resolved": "c1"}
            assert asked == [forward("c1")]  # what the asker was asked, unchanged
            with pytest.raises(DeferredCallError) as refused:
                await asker.forward(forward("gone"))
            assert refused.value.code == ErrorCode.E_CALL_NOT_FOUND

            running.discard("k1")  # handing the partition over: it says moved, the asker waits
            with pytest.raises(DeferredCallError) as moved:
                await asker.forward(forward("c2"))
            assert moved.value.code == ErrorCode.E_CLUSTER_UNAVAILABLE
            assert "c2" in moved.value.message and "still pending" in moved.value.message

            await hold(conn, "k2", "n9")  # a holder that died: no responder on its subject
            with pytest.raises(DeferredCallError) as dead:
                await asker.forward(forward("c3", key="k2"))
            assert dead.value.code == ErrorCode.E_CLUSTER_UNAVAILABLE
            assert [f.call_id for f in asked] == ["c1", "gone"]

            subject = conn.names.node_subject("n1", "answer", "n2")
            for garbage in (b"", b"\xff\x00garbage", b'{"call_id": 7}', b"[]"):
                msg = await conn.nc.request(subject, garbage, timeout=5)
                reply = msgspec.json.decode(msg.data, type=AnswerReply)
                assert reply.code == ErrorCode.E_CONTROL_BAD_REQUEST
            running.add("k1")  # and garbage harmed nothing: the holder answers the next one
            assert await asker.forward(forward("c4")) == {"resolved": "c4"}
        finally:
            await holder.requests.close()
            await asker.requests.close()
            await conn.close()
