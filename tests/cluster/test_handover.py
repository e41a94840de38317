"""A partition handed over (here a drain) while one of its instances runs a turn longer than the
grace period: the turn is cut where it ran and resumed by the next owner, and the send waiting
for it gets that owner's reply, once in the conversation. Before, the cut turn was
answered E_AGENT_CRASHED ("send the request again") and its event acknowledged, so it never ran:
73 sends of a 400-fault `make cluster-faults` run failed so."""

from __future__ import annotations

import asyncio

from protocol.conversation import Role
from tests.cluster.harness import (
    FreshSwarm,
    activate,
    node_name,
    on_node,
    read_history,
    turn_running,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import run_cli

KEYS = [f"h{i}" for i in range(6)]


async def test_a_turn_cut_by_a_handover_runs_again_on_the_next_owner(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    nodes = fresh.nodes
    async with asyncio.timeout(60):
        owners = await activate(nodes, "worker", KEYS)
    key = KEYS[0]
    owner = owners[key]
    other = next(n for n in nodes if n is not owner)
    mark = owner.mark()
    sent = await turn_running(owner, other, "long turn", key)
    async with asyncio.timeout(30):
        code, _, err = await run_cli(*on_node(other, "cluster", "drain", node_name(nodes, owner)))
        assert code == 0, err
        await owner.wait_for("grace_period_over", mark)  # the 8 s turn outlived the 2 s grace
    async with asyncio.timeout(60):
        reply = await sent
    assert reply.ok, reply.error
    assert reply.result["input"] == "slow done: long turn"
    history = await read_history(nats_cluster, fresh.swarm, "worker", key)
    turns = [m.content for m in history if m.content in ("long turn", "slow done: long turn")]
    assert turns == ["long turn", "slow done: long turn"], [m.content for m in history]
    # the next owner resumed the turn: the call the cut stopped is answered to the model as
    # data (it may have had effects, so it is not run again behind the model's back)
    results = [m.content for m in history if m.role is Role.TOOL]
    assert len(results) == 1 and "E_AGENT_CRASHED" in str(results[0]), results
