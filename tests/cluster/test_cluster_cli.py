"""`goondan cluster status|drain` against any node: the whole swarm's nodes, owners and lag;
a drained node gives every partition away (the others answer its instances) and stays in the
status as draining; a node that is not live is a coded error, and so is a one-machine daemon."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.cluster.harness import (
    FreshSwarm,
    StartDaemon,
    node_name,
    on_node,
    owner_of,
    read_history,
    run_elsewhere,
    send_each,
    swarm_of,
    unique_swarm_bundle,
)
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import PYTHON, Daemon, child_env, run_cli

PARTITIONS = 12


def cli_args(node: Daemon, *args: str) -> list[str]:
    return on_node(node, "cluster", *args)


async def status_of(node: Daemon) -> dict[str, object]:
    code, out, err = await run_cli(*cli_args(node, "status", "--json"))
    assert code in (0, 1), err
    result: dict[str, object] = json.loads(out)
    assert (code == 1) == bool(result["unowned"])  # a partition between owners fails it
    return result


async def test_status_and_drain_from_any_node(fresh: FreshSwarm) -> None:
    bundle = fresh.bundle
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        await send_each(nodes[0], {f"k{i}": f"s{i}" for i in range(9)})

    async with asyncio.timeout(60):
        while True:  # a node's live count is in the record it beats every third of the TTL
            views = [await status_of(node) for node in nodes]
            if all(sum(r["liveInstances"] for r in v["nodes"]) >= 9 for v in views):  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.2)
    for view, node in zip(views, nodes, strict=True):
        assert view["swarm"] == swarm_of(bundle)
        assert view["answeredBy"] == node_name(nodes, node)
        rows = view["nodes"]
        assert isinstance(rows, list)
        assert [r["name"] for r in rows] == ["n1", "n2", "n3"]
        assert sum(r["partitions"] for r in rows) == PARTITIONS
        assert view["unowned"] == []
    code, out, _ = await run_cli(*cli_args(nodes[1], "status"))
    assert code == 0 and "n3" in out and "ingress stream" in out
    assert nodes[1].state_root is not None
    code, out, _ = await run_cli("status", "--state-root", str(nodes[1].state_root),
                                 "--swarm", nodes[1].swarm)  # fmt: skip
    assert code == 0 and "node n2" in out  # a node's own table says which node it is

    victim = nodes[2]
    mark = victim.mark()
    code, out, err = await run_cli(*cli_args(nodes[0], "drain", "n3"))
    assert code == 0, err
    async with asyncio.timeout(30):
        await victim.wait_for("cluster_draining", mark)
        await victim.wait_for("cluster_settled", mark, partitions=0)
        while True:  # the others' plans stop counting it once its record says draining
            view = await status_of(nodes[0])
            rows = {r["name"]: r for r in view["nodes"]}  # type: ignore[attr-defined]
            if rows["n3"]["draining"] and rows["n3"]["partitions"] == 0 and not view["unowned"]:
                break
            await asyncio.sleep(0.2)
        again = await asyncio.gather(*(victim.send(f"t{i}", key=f"k{i}") for i in range(9)))
    assert all(r.ok for r in again), [r.error for r in again]
    assert all(r.result["input"] == f"caller: t{i}" for i, r in enumerate(again))
    assert not victim.find("spawned", mark)  # nothing runs on the drained node any more

    code, _, err = await run_cli(*cli_args(nodes[0], "drain", "nobody"))
    assert code == 1 and "E_CLUSTER_NODE_UNKNOWN" in err


async def test_cluster_commands_on_one_machine_are_a_coded_error(
    start_daemon: StartDaemon, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    state_root = tmp_path_factory.mktemp("s")  # short: a unix socket path is 107 bytes at most
    async with asyncio.timeout(60):
        daemon = await start_daemon(bundle, swarm=swarm_of(bundle), state_root=state_root)
        code, _, err = await run_cli(*cli_args(daemon, "status"))
    assert code == 1 and "E_CLUSTER_CONFIG" in err


async def test_status_on_any_node_lists_every_nodes_processes(fresh: FreshSwarm) -> None:
    keys = [f"k{i}" for i in range(9)]
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        await send_each(nodes[0], {k: f"s{k}" for k in keys})
        code, out, err = await run_cli(*on_node(nodes[2], "status", "--json"))
        assert code == 0, err
        view = json.loads(out)
        assert view["unanswered"] == []
        callers = {p["instanceKey"]: p["node"] for p in view["processes"]
                   if p["kind"] == "agent" and p["name"] == "caller"}  # fmt: skip
        assert set(callers) == set(keys)
        for key, node in callers.items():  # each row names the node that runs it
            assert node == node_name(nodes, owner_of(nodes, "caller", key))
        code, out, err = await run_cli(*on_node(nodes[2], "status"))
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("NODE"))
    assert header.split()[:3] == ["NODE", "KIND", "NAME"]
    for node in set(callers.values()):
        assert any(line.startswith(node + " ") for line in out.splitlines())


async def test_instance_show_on_any_node_reads_the_swarms_history(fresh: FreshSwarm) -> None:
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        reply = await nodes[0].send("req colour", key="v1")  # caller@v1 asks worker@v1
        assert reply.ok, reply.error
        runs = {owner_of(nodes, "caller", "v1"), owner_of(nodes, "worker", "v1")}
        reader = next((n for n in nodes if n not in runs), nodes[0])
        code, out, err = await run_cli(*on_node(reader, "instance", "show", "v1", "--json"))
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        said = [(m["agent"], m["role"], m.get("content")) for m in lines]
        assert ("caller", "user", "req colour") in said
        assert ("worker", "user", "req colour") in said
        assert ("worker", "assistant", "worker: req colour") in said
        assert all(m["instanceKey"] == "v1" for m in lines)
        assert any(m.get("traceId") for m in lines if m["role"] == "user")

        code, out, err = await run_cli(*on_node(reader, "instance", "show", "v1",
                                                "--agent", "worker", "--json"))  # fmt: skip
        assert code == 0, err
        assert {json.loads(line)["agent"] for line in out.splitlines()} == {"worker"}
        code, out, err = await run_cli(*on_node(reader, "instance", "show", "v1"))
        assert code == 0 and "worker: req colour" in out, err
        code, _, err = await run_cli(*on_node(reader, "instance", "show", "nobody"))
    assert code == 1 and "E_INSTANCE_NOT_FOUND" in err


async def test_logs_on_any_node_show_every_nodes_lines(fresh: FreshSwarm) -> None:
    keys = [f"g{i}" for i in range(9)]
    async with asyncio.timeout(90):
        nodes = fresh.nodes
        await send_each(nodes[0], {k: f"hi {k}" for k in keys})
        reader = nodes[0]
        elsewhere = run_elsewhere(nodes, keys, reader)
        code, out, err = await run_cli(*on_node(reader, "logs", "--json"))
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert {line["node"] for line in lines} == {"n1", "n2", "n3"}
        code, out, err = await run_cli(*on_node(reader, "logs", "--instance", elsewhere))
        assert code == 0, err
        owner = node_name(nodes, owner_of(nodes, "caller", elsewhere))
        said = [line for line in out.splitlines() if "turn.completed" in line]
        assert said and all(line.startswith(owner + " ") for line in said), out

        follower = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator",
            *on_node(reader, "logs", "--follow", "--json", "--instance", elsewhere),
            env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert follower.stdout is not None
        try:
            first = json.loads(await follower.stdout.readline())  # it has started
            completed = int(first.get("type") == "turn.completed")
            reply = await nodes[2].send("once more", key=elsewhere)
            assert reply.ok, reply.error
            while completed < 2:  # the first turn's, then the new one's, as it is written
                line = json.loads(await follower.stdout.readline())
                if line.get("type") == "turn.completed":
                    assert line["node"] == owner
                    completed += 1
        finally:
            follower.kill()
            await follower.wait()


async def test_instance_list_on_any_node_lists_the_swarms_instances(fresh: FreshSwarm) -> None:
    keys = [f"i{i}" for i in range(6)]
    async with asyncio.timeout(60):
        nodes = fresh.nodes
        await send_each(nodes[1], {k: f"hi {k}" for k in keys})
        code, out, err = await run_cli(*on_node(nodes[0], "instance", "list", "--json"))
    assert code == 0, err
    rows = {(r["agent"], r["instanceKey"]): r for r in json.loads(out)}
    assert {k for a, k in rows if a == "caller"} == set(keys)
    for key in keys:  # each with the node that runs it
        row = rows[("caller", key)]
        assert row["status"] == "idle"
        assert row["node"] == node_name(nodes, owner_of(nodes, "caller", key))


async def test_instance_delete_on_any_node_removes_it_everywhere(
    fresh: FreshSwarm, nats_cluster: NatsCluster
) -> None:
    swarm = fresh.swarm
    keys = [f"d{i}" for i in range(6)]
    async with asyncio.timeout(90):
        nodes = fresh.nodes
        await send_each(nodes[1], {k: f"hi {k}" for k in keys})
        asker = nodes[0]
        gone = run_elsewhere(nodes, keys, asker)
        owner = owner_of(nodes, "caller", gone)
        code, out, err = await run_cli(*on_node(asker, "instance", "delete", gone, "--yes"))
        assert code == 0, err
        name = node_name(nodes, owner)
        assert f"stopped {name}: agent:caller:{gone}" in out
        assert "purged 1 conversation(s)" in out
        assert owner.state_root is not None
        assert not (owner.state_root / "instances" / swarm / gone).exists()
        code, out, err = await run_cli(*on_node(asker, "instance", "list", "--json"))
        assert code == 0, err
        assert gone not in {r["instanceKey"] for r in json.loads(out)}
        assert await read_history(nats_cluster, swarm, "caller", gone) == []
        code, _, err = await run_cli(*on_node(asker, "instance", "show", gone))
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err
        code, _, err = await run_cli(*on_node(asker, "instance", "delete", "nobody", "--yes"))
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err

        again = await nodes[2].send("back again", key=gone)  # a fresh conversation
        assert again.ok, again.error
        history = await read_history(nats_cluster, swarm, "caller", gone)
    assert [m.content for m in history if m.role.value == "user"] == ["back again"]
