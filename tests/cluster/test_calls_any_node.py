"""A swarm's deferred calls are the swarm's, not a node's: `goondan calls list` on any node lists
every pending call, and `calls resolve|approve|deny` on a node that does not run the call's
instance is forwarded to the node that does; the resumed turn's reply comes back to the asking
client, and the turn ends once."""

from __future__ import annotations

import asyncio
import json

from tests.cluster.harness import (
    FreshSwarm,
    on_node,
    owner_of,
    read_history,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon, run_cli


async def pending_on_owner(nodes: list[Daemon], text: str, key: str) -> tuple[Daemon, str]:
    """Send `text` to worker@key (the send ends with the call's notice); the node that runs
    the instance and the call's id."""
    marks = [n.mark() for n in nodes]
    notice = await nodes[0].send(text, "worker", key=key)
    assert notice.ok, notice.error
    owner = owner_of(nodes, "worker", key)
    made = await owner.wait_for("deferred_call_pending", marks[nodes.index(owner)],
                                agent="worker", instanceKey=key)  # fmt: skip
    return owner, str(made["call_id"])


async def assistant_texts(cluster: NatsCluster, swarm: str, key: str, count: int) -> list[str]:
    while True:
        history = await read_history(cluster, swarm, "worker", key)
        said = [str(m.content) for m in history if m.role.value == "assistant" and m.content]
        if len(said) >= count:
            return said
        await asyncio.sleep(0.2)


async def test_calls_are_listed_and_answered_from_any_node(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        owner, call_id = await pending_on_owner(nodes, "ask colour", "a1")
        other, third = [n for n in nodes if n is not owner]

        code, out, err = await run_cli(*on_node(other, "calls", "list", "--json"))
        assert code == 0, err
        [listed] = [c for c in json.loads(out) if c["id"] == call_id]
        assert (listed["agent"], listed["instanceKey"], listed["method"]) == (
            "worker", "a1", "cluster.ask",
        )  # fmt: skip

        mark = owner.mark()
        code, out, err = await run_cli(*on_node(other, "calls", "resolve", call_id,
                                                 "--result", json.dumps("blue")))  # fmt: skip
        assert code == 0, err
        assert owner.find("answer_forwarded_here", mark, call_id=call_id)
        said = await assistant_texts(nats_cluster, swarm, "a1", 1)
        [answer] = [t for t in said if t.startswith("asked:")]  # the turn ended once
        assert "blue" in answer
        assert answer in out  # the resumed turn's reply, back through the asked node

        code, _, err = await run_cli(*on_node(third, "calls", "resolve", call_id,
                                               "--result", json.dumps("red")))  # fmt: skip
        assert code == 1 and "E_CALL_NOT_FOUND" in err  # answered once, wherever asked
        code, out, err = await run_cli(*on_node(third, "calls", "list", "--json"))
        assert code == 0 and call_id not in out, err


async def test_approvals_are_decided_from_any_node(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        for key, action in (("w1", "approve"), ("w2", "deny")):
            owner, call_id = await pending_on_owner(nodes, "wipe", key)
            other = next(n for n in nodes if n is not owner)
            extra = ("--message", "not today") if action == "deny" else ()
            code, out, err = await run_cli(*on_node(other, "calls", action, call_id, *extra))
            assert code == 0, err
            said = await assistant_texts(nats_cluster, swarm, key, 1)
            assert said[0] in out  # the resumed turn's reply, back through the asked node
            assert len(said) == 1, said  # the turn ended once
            if action == "approve":
                assert '"output":"wiped"' in said[0], said  # the tool ran
            else:
                assert "E_TOOL_PERMISSION_DENIED" in said[0], said
                assert "not today" in said[0]
