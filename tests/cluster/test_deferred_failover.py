"""Proof 6: a turn suspended on a deferred (client-side) call whose node is SIGKILLed. The
call was kept in the swarm's `calls` bucket before it was announced; the node that takes the
partition writes it back before the instance starts, the instance resumes the suspended turn,
and the call is answered with its id unchanged through that node; the turn ends once."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.cluster.harness import (
    FreshSwarm,
    on_node,
    owner_of,
    read_history,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import run_cli

KEY = "d1"


@pytest.mark.quarantine
async def test_a_deferred_call_outlives_its_node(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        first = await nodes[0].send("hi", "worker", key=KEY)
        assert first.ok, first.error
    victim = owner_of(nodes, "worker", KEY)
    survivors = [n for n in nodes if n is not victim]
    marks = [n.mark() for n in survivors]
    async with asyncio.timeout(30):
        accepted = await survivors[0].send("ask colour", "worker", key=KEY, wait=False)
        assert accepted.ok, accepted.error
        made = await victim.wait_for("deferred_call_pending", agent="worker", instanceKey=KEY)
    victim.proc.kill()

    async with asyncio.timeout(60):
        # the node that takes the partition writes the call back before the instance starts
        waits = {asyncio.ensure_future(n.wait_for("deferred_calls_restored", m))
                 for n, m in zip(survivors, marks, strict=True)}  # fmt: skip
        _, waiting = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waiting:
            task.cancel()
        owner = next(n for n, m in zip(survivors, marks, strict=True)
                     if n.find("deferred_calls_restored", m))  # fmt: skip
        # the same call id, answered through the new owner
        code, out, err = await run_cli(*on_node(owner, "calls", "list", "--json"))
        assert code == 0, err
        assert made["call_id"] in out
        code, _, err = await run_cli(
            *on_node(owner, "calls", "resolve", made["call_id"], "--result", json.dumps("blue"))
        )
        assert code == 0, err
        while True:
            history = await read_history(nats_cluster, swarm, "worker", KEY)
            said = [m.content for m in history if m.role.value == "assistant"]
            answers = [text for text in said if text.startswith("asked:")]
            if answers:
                break
            await asyncio.sleep(0.2)
    assert [m.content for m in history if m.role.value == "user"] == ["hi", "ask colour"]
    assert len(answers) == 1 and "blue" in answers[0], answers  # the turn ended once
