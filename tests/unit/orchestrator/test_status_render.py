"""`goondan status` text: on one machine the table as it always was; on a cluster node a NODE
column first, and a line for each node whose table did not come."""

from __future__ import annotations

from orchestrator.commands.status import render
from protocol.jsontypes import JsonObject


def process(name: str, key: str, node: str | None) -> JsonObject:
    return {"id": f"agent:{name}:{key}:1", "kind": "agent", "name": name, "instanceKey": key,
            "pid": 41, "status": "idle", "restarts": 0, "generation": 1, "lastExit": None,
            "retryInSeconds": None, "pending": 0, "node": node}  # fmt: skip


def status(node: str, processes: list[JsonObject], unanswered: list[str]) -> JsonObject:
    orchestrator = {"pid": 7, "swarm": "s", "startedAt": "2026-11-26T00:00:00Z", "node": node}
    return {"orchestrator": orchestrator, "processes": processes, "unanswered": unanswered}


def test_one_machine_has_no_node_column() -> None:
    lines = render(status("", [process("a", "k", None)], [])).splitlines()
    assert lines[1].split()[:2] == ["KIND", "NAME"]
    assert lines[2].split()[:3] == ["agent", "a", "k"]


def test_a_cluster_node_names_the_node_of_each_process_and_who_did_not_answer() -> None:
    rows = [process("a", "k1", "n1"), process("a", "k2", "n2")]
    lines = render(status("n1", rows, ["n3"])).splitlines()
    assert "node n1" in lines[0]
    assert lines[1].split()[:3] == ["NODE", "KIND", "NAME"]
    assert [line.split()[:4] for line in lines[2:4]] == [
        ["n1", "agent", "a", "k1"], ["n2", "agent", "a", "k2"],
    ]  # fmt: skip
    assert "node n3 did not answer: its processes are not listed" in lines
