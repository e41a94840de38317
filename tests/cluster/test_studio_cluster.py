"""Studio on a cluster node shows the whole swarm, not the node's files: the instances, the
conversation, a trace's waterfall, the graph and the log lines of an instance another node
runs (a real `goondan studio` process, httpx as the client)."""

from __future__ import annotations

import asyncio

from tests.cluster.harness import (
    FreshSwarm,
    node_name,
    on_node,
    owner_of,
    run_elsewhere,
    send_each,
)
from tests.integration.studio_harness import first_event, studio


async def test_studio_on_any_node_shows_what_another_node_runs(fresh: FreshSwarm) -> None:
    keys = [f"s{i}" for i in range(6)]
    async with asyncio.timeout(120):
        nodes = fresh.nodes
        await send_each(nodes[1], {k: f"hi {k}" for k in keys})
        reader = nodes[0]
        elsewhere = run_elsewhere(nodes, keys, reader)
        owner = node_name(nodes, owner_of(nodes, "caller", elsewhere))
        async with (
            studio(*on_node(reader)) as s,
            s.client(timeout=30) as http,
        ):
            rows = (await http.get("/api/instances")).json()["instances"]
            assert {r["instanceKey"] for r in rows if r["agent"] == "caller"} == set(keys)

            params = {"key": elsewhere, "agent": "caller"}
            async with http.stream("GET", "/api/stream/conversation", params=params) as r:
                assert r.status_code == 200
                messages = await first_event(r, "messages")
            said = [(m["role"], m.get("content")) for m in messages]
            assert ("user", f"hi {elsewhere}") in said, said
            trace = next(m["traceId"] for m in messages if m.get("traceId"))

            spans = (await http.get(f"/api/trace/{trace}")).json()["spans"]
            assert (spans[0]["kind"], spans[0]["instanceKey"]) == ("turn", elsewhere)
            assert {"step", "model"} <= {span["kind"] for span in spans}

            graph = (await http.get("/api/graph")).json()
            assert any(e["target"] == "agent:caller" and e["count"] >= len(keys)
                       for e in graph["edges"]), graph  # fmt: skip

            lines = (await http.get("/api/logs", params={"instance": elsewhere})).json()["lines"]
            done = [line for line in lines if line["data"].get("type") == "turn.completed"]
            assert done and all(line["node"] == owner for line in done), lines

            missing = await http.get("/api/stream/conversation", params={"key": "nobody"})
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "E_INSTANCE_NOT_FOUND"
