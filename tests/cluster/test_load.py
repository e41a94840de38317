"""Proofs 1 and 2 of cluster mode under load: every event whose acceptance was acknowledged is
in its conversation exactly once, and each instance's history follows its ingress order,
while about 20 % of the events make their instance ask another agent's instance (a different
partition, on another node for some keys) through agents__request.

Each key has one sender that sends in sequence through the three nodes in turn (ingress order
= the order of its sends, whichever node accepted them). `CLUSTER_LOAD_SECONDS` (default 5)
sets the length; `make cluster-chaos` runs it long.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

from tests.cluster.harness import (
    FreshSwarm,
    owner_of,
    read_history,
    user_texts,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon

KEYS = [f"u{i}" for i in range(8)]
LOAD_SECONDS = float(os.environ.get("CLUSTER_LOAD_SECONDS", "5"))
REQUEST_SHARE = 0.2


async def sender(nodes: list[Daemon], key: str, until: float, sent: list[str]) -> None:
    """Sends in sequence (each acknowledged before the next): its ingress order is `sent`."""
    rng = random.Random(key)
    i = 0
    while time.monotonic() < until:
        text = f"req {key} {i}" if rng.random() < REQUEST_SHARE else f"e {key} {i}"
        reply = await nodes[i % len(nodes)].send(text, key=key, wait=False)
        assert reply.ok, (key, text, reply.error)  # nothing fails on a healthy cluster
        sent.append(text)
        i += 1


async def test_no_loss_no_duplicates_and_order_under_load_with_cross_node_requests(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    nodes = fresh.nodes
    sent: dict[str, list[str]] = {key: [] for key in KEYS}
    started = time.monotonic()
    async with asyncio.timeout(LOAD_SECONDS + 120):
        await asyncio.gather(*(
            sender(nodes, key, started + LOAD_SECONDS, sent[key]) for key in KEYS
        ))  # fmt: skip
    accepted = sum(len(texts) for texts in sent.values())
    requests = sum(1 for texts in sent.values() for t in texts if t.startswith("req"))

    deadline = time.monotonic() + 120 + LOAD_SECONDS
    while True:  # the turns run behind the acknowledgements
        async with asyncio.timeout(60):
            callers = {k: user_texts(await read_history(nats_cluster, swarm, "caller", k))
                       for k in KEYS}  # fmt: skip
        if all(len(callers[k]) >= len(sent[k]) for k in KEYS):
            break
        assert time.monotonic() < deadline, {k: (len(callers[k]), len(sent[k])) for k in KEYS}
        await asyncio.sleep(0.5)
    elapsed = time.monotonic() - started
    async with asyncio.timeout(60):
        workers = {k: user_texts(await read_history(nats_cluster, swarm, "worker", k))
                   for k in KEYS}  # fmt: skip
    for key in KEYS:
        assert callers[key] == sent[key], key  # exactly once each, in ingress order
        asked = [t for t in sent[key] if t.startswith("req")]
        assert workers[key] == asked, key  # each request served once, in order
    crossing = [k for k in KEYS if asked_any(sent[k])
                and owner_of(nodes, "caller", k) is not owner_of(nodes, "worker", k)]  # fmt: skip
    assert crossing, "no request crossed nodes: the proof needs some"
    print(
        f"\nload: {accepted} events ({requests} with a request, {len(crossing)} of "
        f"{len(KEYS)} keys asking across nodes) all in order once, done in {elapsed:.1f} s"
    )


def asked_any(texts: list[str]) -> bool:
    return any(t.startswith("req") for t in texts)
