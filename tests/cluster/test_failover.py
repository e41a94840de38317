"""A node's death (SIGKILL): its partitions go to the survivors, its instances answer there with
the conversation they had (rebuilt from the history stream), every acknowledged event is in its
conversation exactly once and in order. Times are printed, never asserted (`make bench`)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from tests.cluster.harness import (
    FreshSwarm,
    owner_of,
    read_history,
    user_texts,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon

KEYS = [f"k{i}" for i in range(12)]


async def send_round(nodes: list[Daemon], label: str, keys: list[str]) -> None:
    replies = await asyncio.gather(*(
        nodes[i % len(nodes)].send(f"{label} {key}", key=key) for i, key in enumerate(keys)
    ))  # fmt: skip
    for key, reply in zip(keys, replies, strict=True):
        assert reply.ok, (key, reply.error)
        assert reply.result["input"] == f"caller: {label} {key}"


async def timed(node: Daemon, text: str, key: str) -> float:
    """When the reply to one send came back (monotonic)."""
    reply = await node.send(text, key=key)
    assert reply.ok, (key, reply.error)
    return time.monotonic()


def _wall(line: dict[str, object]) -> float:
    stamp = str(line["timestamp"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


async def test_a_killed_node_s_instances_answer_elsewhere_with_their_history(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        for label in ("a", "b"):
            await send_round(nodes, label, KEYS)
        before = {k: user_texts(await read_history(nats_cluster, swarm, "caller", k)) for k in KEYS}
    assert all(texts == [f"a {k}", f"b {k}"] for k, texts in before.items()), before
    owners = {k: owner_of(nodes, "caller", k) for k in KEYS}
    victim = max(nodes, key=lambda n: sum(1 for o in owners.values() if o is n))
    moved = [k for k in KEYS if owners[k] is victim]
    survivors = [n for n in nodes if n is not victim]
    assert moved

    # under load: sends to every instance through the survivors while the victim dies
    marks = [n.mark() for n in survivors]
    load = asyncio.ensure_future(send_round(survivors, "c", KEYS))
    killed_at, killed_wall = time.monotonic(), time.time()
    victim.proc.kill()
    async with asyncio.timeout(60):
        answered = await asyncio.gather(*(
            timed(survivors[i % 2], f"m {key}", key) for i, key in enumerate(moved)
        ))  # fmt: skip
        await load
        first = time.monotonic() - killed_at
        await send_round(survivors, "d", moved)
    reowned = max(
        _wall(line) - killed_wall
        for node, mark in zip(survivors, marks, strict=True)
        for line in node.find("partition_gained", mark)
    )
    moved_answers = sorted(t - killed_at for t in answered)
    print(f"\nfailover: {len(moved)} instances moved; partitions re-owned {reowned:.2f} s after "
          f"the kill; first event of a moved instance answered {moved_answers[0]:.2f} s "
          f"(max {moved_answers[-1]:.2f} s); load round {first:.2f} s")  # fmt: skip

    async with asyncio.timeout(30):
        for key in KEYS:
            texts = user_texts(await read_history(nats_cluster, swarm, "caller", key))
            if key in moved:  # "m" and "c" went in concurrently: either may be first
                assert sorted(texts[2:4]) == sorted([f"c {key}", f"m {key}"]), (key, texts)
                want = [f"a {key}", f"b {key}", *texts[2:4], f"d {key}"]
            else:
                want = [f"a {key}", f"b {key}", f"c {key}"]
            assert texts == want, (key, texts)  # exactly once each, in ingress order
    rebuilt = sum(len(n.find("history_rebuilt")) for n in survivors)
    assert rebuilt >= len(moved)  # the new owners read the conversations from the stream
