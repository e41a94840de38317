"""AgentsService: route checks (not found / not in swarm / self / cycle) and spawn/list/catalog."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.calls.agents import AgentsService
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessTable
from orchestrator.swarm.view import CurrentSwarm, SwarmView
from protocol.errors import ErrorCode
from protocol.events import ReplyTo, Source, SourceKind, new_event
from protocol.ids import Address, agent_address
from protocol.messages import CallOp, CallPayload, CallResultPayload

A = agent_address("a", "k")
B = agent_address("b", "k")


VIEW = SwarmView(
    name="s",
    entry_agent="a",
    default_instance_key="s",
    members=("a", "b"),
    declared=frozenset({"a", "b", "c"}),
)


def service(
    tmp_path: Path, ensured: list[Address] | None = None, roots: tuple[Path, ...] = ()
) -> AgentsService:
    sink = ensured if ensured is not None else []
    return AgentsService(
        table=ProcessTable(),
        swarm=CurrentSwarm(VIEW),
        instance_root=lambda t: tmp_path / t.instance_key / t.name,
        ensure=sink.append,
        allowed_roots=roots,
    )


def request(chain: list[str] | None = None, reply: bool = True) -> object:
    source = Source(kind=SourceKind.AGENT, name="a", instance_key="k")
    return new_event(
        type="agent.request", input="x", instance_key="k", source=source,
        reply_to=ReplyTo(target="agent:a:k", correlation_id="c") if reply else None,
        metadata={"callChain": chain} if chain is not None else None,
    )  # fmt: skip


def test_route_checks(tmp_path: Path) -> None:
    svc = service(tmp_path)
    assert svc.check_route(A, B, request(["a@k"])) is None  # type: ignore[arg-type]
    missing = svc.check_route(A, agent_address("zz", "k"), request())  # type: ignore[arg-type]
    assert missing is not None and missing.code == ErrorCode.E_AGENT_NOT_FOUND
    assert "a, b" in missing.message
    outside = svc.check_route(A, agent_address("c", "k"), request())  # type: ignore[arg-type]
    assert outside is not None and outside.code == ErrorCode.E_AGENT_NOT_IN_SWARM
    itself = svc.check_route(A, A, request(["a@k"]))  # type: ignore[arg-type]
    assert itself is not None and itself.code == ErrorCode.E_AGENT_SELF_REQUEST
    cycle = svc.check_route(B, A, request(["a@k", "b@k"]))  # type: ignore[arg-type]
    assert cycle is not None and cycle.code == ErrorCode.E_AGENT_CYCLE
    assert "a@k → b@k → a@k" in cycle.message
    # a send never waits, so it cannot deadlock: only the target is checked
    assert svc.check_route(B, A, request(["a@k", "b@k"], reply=False)) is None  # type: ignore[arg-type]


def test_spawn_records_ownership_and_list_and_catalog(tmp_path: Path) -> None:
    ensured: list[Address] = []
    svc = service(tmp_path, ensured, roots=(tmp_path / "shared",))
    cwd = tmp_path / "shared" / "cwd"
    args = {"target": "b", "instanceKey": "w1", "cwd": str(cwd)}
    result = svc.answer(A, CallPayload(call_id="1", op=CallOp.SPAWN, args=args))
    assert result.ok, result.error
    assert result.result == {"target": "b", "instanceKey": "w1", "spawned": True, "cwd": str(cwd)}
    assert ensured == [agent_address("b", "w1")] and cwd.is_dir()
    record = json.loads((tmp_path / "w1" / "b" / "spawn.json").read_text())
    assert (record["ownerAgent"], record["ownerInstanceKey"], record["cwd"]) == ("a", "k", str(cwd))
    svc.table.entry(agent_address("b", "w1")).status = ProcessStatus.IDLE
    svc.table.entry(B)
    listed = svc.answer(A, CallPayload(call_id="2", op=CallOp.LIST)).result
    assert listed["count"] == 1 and listed["agents"][0]["instanceKey"] == "w1"
    everything = svc.answer(A, CallPayload(call_id="3", op=CallOp.LIST, args={"includeAll": True}))
    assert everything.result["count"] == 2
    # a restarted daemon reads the ownership back from disk
    again = service(tmp_path)
    again.table.entry(agent_address("b", "w1"))
    assert again.answer(A, CallPayload(call_id="4", op=CallOp.LIST)).result["count"] == 1
    catalog = svc.answer(B, CallPayload(call_id="5", op=CallOp.CATALOG)).result
    assert catalog["callableAgents"] == ["a"] and catalog["entryAgent"] == "a"


def test_spawn_refusals_are_coded(tmp_path: Path) -> None:
    svc = service(tmp_path)
    bad = svc.answer(A, CallPayload(call_id="1", op=CallOp.SPAWN, args={"target": "zz"}))
    assert bad.error is not None and bad.error.code == ErrorCode.E_AGENT_NOT_FOUND
    rel = svc.answer(A, CallPayload(call_id="2", op=CallOp.SPAWN, args={"target": "b", "cwd": "x"}))
    assert rel.ok and rel.result["cwd"] == str(tmp_path / "k" / "a" / "workdir" / "x")
    generated = svc.answer(A, CallPayload(call_id="3", op=CallOp.SPAWN, args={"target": "b"}))
    assert generated.ok and generated.result["instanceKey"].startswith("b-")


def _spawn(svc: AgentsService, caller: Address, **args: object) -> CallResultPayload:
    return svc.answer(caller, CallPayload(call_id="s", op=CallOp.SPAWN, args=args))


def test_a_spawn_cannot_re_root_an_agent(tmp_path: Path) -> None:
    """Found by the attack review: `cwd: "/"` made the spawned agent's file-system tool read
    /etc/passwd and the state root's secrets, and a spawn naming an existing instance rewrote
    its owner and cwd."""
    svc = service(tmp_path)
    own = tmp_path / "k" / "a" / "workdir"
    own.mkdir(parents=True)
    (own / "out").symlink_to("/")
    for cwd in ("/", "/etc", str(tmp_path / "k"), "../..", "out", "out/etc", str(tmp_path)):
        refused = _spawn(svc, A, target="b", instanceKey="w", cwd=cwd)
        assert refused.error is not None, cwd
        assert refused.error.code == ErrorCode.E_AGENT_SPAWN_DENIED
    assert not (tmp_path / "w").exists()  # nothing recorded, nothing created
    # the entry agent's own instance exists: a spawn naming it changes nothing
    (tmp_path / "k" / "b").mkdir(parents=True)
    taken = _spawn(svc, A, target="b", instanceKey="k", cwd="sub")
    assert taken.error is not None and taken.error.code == ErrorCode.E_AGENT_SPAWN_DENIED
    assert not (tmp_path / "k" / "b" / "spawn.json").exists()
    # an instance another agent spawned keeps its owner and workdir
    assert _spawn(svc, A, target="b", instanceKey="mine", cwd="sub").ok
    svc.table.entry(agent_address("b", "mine")).status = ProcessStatus.IDLE
    record = (tmp_path / "mine" / "b" / "spawn.json").read_text()
    again = _spawn(svc, B, target="b", instanceKey="mine", cwd="other")
    assert again.error is not None and again.error.code == ErrorCode.E_AGENT_SPAWN_DENIED
    same = _spawn(svc, B, target="b", instanceKey="mine")  # no cwd: just make sure it runs
    assert same.ok and same.result["cwd"] == str(own / "sub")
    assert (tmp_path / "mine" / "b" / "spawn.json").read_text() == record
