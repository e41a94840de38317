"""A node's death (SIGKILL): its partitions go to the survivors, its instances answer there with
the conversation they had (rebuilt from the history stream), every acknowledged event is in its
conversation exactly once and in order. Times are printed, never asserted (`make bench`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.cluster.harness import (
    StartDaemon,
    owner_of,
    read_history,
    start_nodes,
    swarm_of,
    unique_swarm_bundle,
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


async def test_a_killed_node_s_instances_answer_elsewhere_with_their_history(
    start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    swarm = swarm_of(bundle)
    async with asyncio.timeout(60):
        nodes = await start_nodes(start_daemon, nats_cluster, bundle, tmp_path)
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
    load = asyncio.ensure_future(send_round(survivors, "c", KEYS))
    killed_at = time.monotonic()
    victim.proc.kill()
    async with asyncio.timeout(60):
        await load
        first = time.monotonic() - killed_at
        await send_round(survivors, "d", moved)
    print(f"\nfailover: {len(moved)} instances moved; load round answered "
          f"{first:.2f} s after the kill")  # fmt: skip

    async with asyncio.timeout(30):
        for key in KEYS:
            texts = user_texts(await read_history(nats_cluster, swarm, "caller", key))
            want = [f"a {key}", f"b {key}", f"c {key}"] + ([f"d {key}"] if key in moved else [])
            assert texts == want, (key, texts)  # exactly once each, in ingress order
    rebuilt = sum(len(n.find("history_rebuilt")) for n in survivors)
    assert rebuilt >= len(moved)  # the new owners read the conversations from the stream
