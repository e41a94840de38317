"""Faults under load (README: Running on several machines; docs/cluster.md "Faults"): 3 NATS
servers and 3 nodes, each in a network namespace; while every instance key gets sends, the
nemesis injects each fault kind FAULT_ROUNDS times (unset: once, less the slow kinds of
`nemesis.DRIVE_LEAVES_OUT`; `make cluster-faults`: 10) in an order FAULT_SEED decides (only
the kinds of FAULT_KINDS when set), heals it and waits for every key to answer again (and with
FAULT_SETTLE=S watches S seconds more for outages after that). Then
every acknowledged send is in its instance's conversation once and in order, and so is every
acknowledged request in the `worker` instance it asked (across nodes for most keys)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from pathlib import Path

from tests.cluster.harness import read_history, swarm_of, unique_swarm_bundle, user_texts
from tests.faults import nemesis
from tests.faults.checker import broken_chains, check, longest_gap, unavailability
from tests.faults.cluster import NsNatsCluster, start_ns_node
from tests.faults.workload import Workload, crossing

KEYS = [f"k{i}" for i in range(6)]
RECOVERY = 45.0
SETTLE = float(os.environ.get("FAULT_SETTLE", "0"))
"""Seconds each fault's aftermath is watched once every key answered again, before the next
fault: its longest gap then counts the outages that follow a heal (a second election), not
only the first wait."""


async def recovered(work: Workload, healed: float) -> float:
    """Until every key answered a send finished after `healed` (polled: the answers land in a
    list), bounded; the longest wait."""
    deadline = time.monotonic() + RECOVERY
    while unavailability(work.outcomes, healed, KEYS) == float("inf"):
        assert time.monotonic() < deadline, f"a key did not answer {RECOVERY} s after the heal"
        await asyncio.sleep(0.2)
    return unavailability(work.outcomes, healed, KEYS)


def _trace(
    world: nemesis.World, work: Workload, faults: list[dict[str, object]], nats: NsNatsCluster
) -> None:
    """FAULT_TRACE=DIR: the run's timeline for finding where recovery time goes: each fault's
    start and heal (wall clock), each send (wall clock), the nodes' log lines and the servers'
    logs."""
    where = os.environ.get("FAULT_TRACE")
    if not where:
        return
    out = Path(where)
    out.mkdir(parents=True, exist_ok=True)
    shift = time.time() - time.monotonic()
    sends = [{"key": o.key, "text": o.text, "sent": o.sent + shift, "done": o.done + shift,
              "ok": o.ok, "code": o.code, "answer": o.answer and o.answer[:300]}
             for o in work.outcomes]  # fmt: skip
    nodes = {f"n{i + 1}": node.lines for i, node in enumerate(world.nodes)}
    nodes |= {f"retired{i}": node.lines for i, node in enumerate(world.retired)}
    (out / "trace.json").write_text(json.dumps({"faults": faults, "sends": sends, "nodes": nodes}))
    for server in nats.servers:
        (out / server.log.name).write_bytes(server.log.read_bytes())


async def test_every_acknowledged_send_survives_the_faults(
    ns_nats: NsNatsCluster, tmp_path: Path
) -> None:
    rounds = int(os.environ.get("FAULT_ROUNDS", "1"))
    seed = int(os.environ.get("FAULT_SEED", str(random.randrange(1 << 31))))
    skip = nemesis.skipped(ns_nats)
    if "FAULT_ROUNDS" not in os.environ:  # the drive in `make test`: kept short
        skip |= dict.fromkeys(nemesis.DRIVE_LEAVES_OUT, "make cluster-faults only (slow)")
    only = os.environ.get("FAULT_KINDS")  # a comma-separated subset (reproducing one kind)
    if only:
        unknown = set(only.split(",")) - set(nemesis.KINDS)
        assert not unknown, f"FAULT_KINDS: no kind {sorted(unknown)} (kinds: {list(nemesis.KINDS)})"
        skip |= {
            kind: "not in FAULT_KINDS" for kind in nemesis.KINDS if kind not in only.split(",")
        }
    print(f"\nFAULT_SEED={seed} FAULT_ROUNDS={rounds} not injected: {skip}")
    bundle = unique_swarm_bundle(tmp_path)
    bundle_swarm = swarm_of(bundle)
    assert crossing(KEYS, ["n1", "n2", "n3"]), "no key's request crosses nodes: pick other keys"
    rng = random.Random(seed)
    async with asyncio.timeout(60 + rounds * len(nemesis.KINDS) * (RECOVERY + SETTLE + 15)):
        nodes = list(await asyncio.gather(*(
            start_ns_node(ns_nats.net, ns_nats, bundle, f"n{i + 1}", tmp_path) for i in range(3)
        )))  # fmt: skip
        world = nemesis.World(ns_nats, nodes, bundle, tmp_path)
        work = Workload(world, KEYS)
        running: asyncio.Future[None] | None = None
        faults: list[dict[str, object]] = []
        try:
            for node in nodes:
                await node.wait_for("cluster_settled", nodes=3)
            running = asyncio.ensure_future(work.run())
            waits: dict[str, list[float]] = {}
            for kind in nemesis.schedule(seed, rounds, skip):
                began = time.time()
                what = await nemesis.KINDS[kind](world, rng)
                healed = time.monotonic()
                faults.append({"kind": kind, "what": what, "began": began, "healed": time.time()})
                wait = await recovered(work, healed)
                waits.setdefault(kind, []).append(wait)
                line = f"{kind:<18} {what:<40} answered again after {wait:5.1f} s"
                if SETTLE:
                    await asyncio.sleep(SETTLE)  # an observation window, not a wait for a state
                    gap = longest_gap(work.outcomes, healed, time.monotonic(), KEYS)
                    line += f"; longest gap {gap:5.1f} s"
                print(line)
            work.stopping.set()
            await running
            said = {(agent, k): user_texts(await read_history(ns_nats, bundle_swarm, agent, k))
                    for agent in ("caller", "worker") for k in KEYS}  # fmt: skip
        finally:
            if running is not None and not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
            for node in [*world.nodes, *world.retired]:
                with contextlib.suppress(ProcessLookupError):  # a killed one is gone
                    node.signal(signal.SIGCONT)
                await node.close()
            _trace(world, work, faults, ns_nats)
    callers = {k: said["caller", k] for k in KEYS}
    report = check(work.outcomes, callers, {k: said["worker", k] for k in KEYS})
    async with asyncio.timeout(30):
        for agent, key in said:
            report.double_writers += await broken_chains(ns_nats, bundle_swarm, agent, key)
    report.unavailable = {kind: max(w) for kind, w in waits.items()}
    print(report.table())
    assert report.ok, report.table()
    assert report.acknowledged > 0 and report.requests > 0, report.table()
