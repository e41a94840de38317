"""`goondan cluster status|drain` on a node: the swarm's cluster as NATS has it
(ARCHITECTURE.md §15).

Any node answers for the whole swarm: the live nodes are the `nodes` bucket's records, the
owners the `leases` bucket, the lag each partition consumer's pending and unacknowledged
messages. Draining a node is a key in the `state` bucket (`drain.<node>`) that the node reads
on its next lease tick; it then gives every partition away (running turns finish first) and
the others stop counting it in the plan. A node that starts again clears its own key: a
restart after maintenance puts it back in service.
"""

from __future__ import annotations

import asyncio
import time

import nats.errors
import nats.js.errors

from orchestrator.cluster.leases import NodeRecord, nodes_of, owners_of
from orchestrator.cluster.link import Nats
from orchestrator.cluster.names import token
from protocol.jsontypes import JsonObject

DRAIN_PREFIX = "drain."


def drain_key(node: str) -> str:
    return f"{DRAIN_PREFIX}{token(node)}"


async def drain_requested(nats_: Nats, node: str) -> bool:
    try:
        await nats_.state.get(drain_key(node))
    except nats.js.errors.KeyNotFoundError:
        return False
    return True


async def clear_drain(nats_: Nats, node: str) -> None:
    try:
        await nats_.state.delete(drain_key(node))
    except nats.js.errors.KeyNotFoundError:
        return


class UnknownNode(Exception):
    def __init__(self, node: str, live: list[str]) -> None:
        super().__init__(f"no live node {node!r} in this swarm (live: {', '.join(live) or '-'})")


DRAIN_TAKEN_WITHIN = 5.0
"""How long `drain` waits for the node to say it is draining (it reads the request on its next
lease tick, a third of the lease TTL), so that a `cluster status` right after shows it."""


async def request_drain(nats_: Nats, node: str, within: float = DRAIN_TAKEN_WITHIN) -> JsonObject:
    """Ask `node` to give its partitions away and wait, up to `within`, until its record says
    it is draining (`taken`); UnknownNode when it is not live."""
    records = await nodes_of(nats_)
    if node not in {r.node for r in records}:
        raise UnknownNode(node, sorted(r.node for r in records))
    await nats_.state.put(drain_key(node), str(time.time()).encode())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if any(r.node == node and r.draining for r in await nodes_of(nats_)):
            return {"node": node, "draining": True, "taken": True}
        if loop.time() > deadline:
            return {"node": node, "draining": True, "taken": False}
        await asyncio.sleep(0.1)  # the record is the node's to write: poll the bucket


async def _lag(nats_: Nats, partition: int) -> tuple[int, int]:
    """(messages not yet delivered, delivered and not acknowledged) of one partition."""
    names = nats_.names
    try:
        info = await nats_.js.consumer_info(names.ingress_stream, names.consumer(partition))
    except (nats.js.errors.NotFoundError, nats.errors.TimeoutError):
        return 0, 0
    return int(info.num_pending or 0), int(info.num_ack_pending or 0)


def _node_row(record: NodeRecord, owned: int, now: float) -> JsonObject:
    return {
        "name": record.node,
        "host": record.host,
        "pid": record.pid,
        "control": record.control,
        "lastHeartbeat": record.beat_at,
        "heartbeatAgeSeconds": round(max(0.0, now - record.beat_at), 3),
        "startedAt": record.started_at,
        "partitions": owned,
        "liveInstances": record.live,
        "draining": record.draining,
    }


async def cluster_status(nats_: Nats, partitions: int) -> JsonObject:
    records = await nodes_of(nats_)
    owners = await owners_of(nats_, partitions)
    lags = await asyncio.gather(*(_lag(nats_, p) for p in range(partitions)))
    now = time.time()
    nodes = []
    for record in sorted(records, key=lambda r: r.node):
        row = _node_row(record, sum(1 for n in owners.values() if n == record.node), now)
        mine = [p for p, n in owners.items() if n == record.node]
        row["pending"] = sum(lags[p][0] for p in mine)
        row["unacknowledged"] = sum(lags[p][1] for p in mine)
        nodes.append(row)
    stream = await nats_.js.stream_info(nats_.names.ingress_stream)
    history = await nats_.js.stream_info(nats_.names.history_stream)
    return {
        "swarm": nats_.names.swarm,
        "partitions": partitions,
        "unowned": sorted(set(range(partitions)) - set(owners)),
        "nodes": nodes,
        "ingress": {
            "messages": stream.state.messages,
            "lastSeq": stream.state.last_seq,
            "pending": sum(p for p, _ in lags),
            "unacknowledged": sum(u for _, u in lags),
        },
        "history": {"messages": history.state.messages, "lastSeq": history.state.last_seq},
    }
