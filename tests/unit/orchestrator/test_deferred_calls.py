"""The daemon's pending-call index: scan, list, client notice, resolution routing (ARCHITECTURE.md
§10), with the real router as its broker, then against a fake broker and fake targets."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq.asyncio

from orchestrator.calls.auth import Answerer, operator
from orchestrator.calls.deferred import DeferredCallError, DeferredIndex, answer_of
from orchestrator.routing.router import Router
from orchestrator.supervision.mailboxes import OpenRequest
from orchestrator.supervision.states import ProcessStatus as S
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event, response_to
from protocol.ids import agent_address, parse_address
from protocol.jsonrpc import (
    ANSWER_SUFFIX,
    APPROVE_METHOD,
    RESUMED_CALL,
    JsonRpcResponse,
    PendingCall,
)
from protocol.messages import Call, CallOp, CallPayload, Event
from tests.unit.orchestrator.fakes import (
    FakeBroker,
    FakeLifecycle,
    FakeTargets,
    build_router,
    swarm_of,
)

NOW = 1000.0
SWARM = "s"
CLI = Source(kind=SourceKind.CLI, name="goondan")
OPERATOR = operator("cli", None)


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    """The real router as the index's broker (no process runs: its lifecycle is a fake)."""
    ctx = zmq.asyncio.Context()
    r = build_router(ctx, f"ipc://{tmp_path}/a.sock", ProcessTable(), FakeLifecycle())
    yield r
    r.close()
    ctx.term()


def started(correlation_id: str = "corr") -> AgentEvent:
    reply_to = ReplyTo(target="control", correlation_id=correlation_id)
    return new_event(type="user.message", input="hi", instance_key="k", source=CLI,
                     reply_to=reply_to)  # fmt: skip


def pending(
    call_id: str, expires_at: float = NOW + 60, event: AgentEvent | None = None
) -> PendingCall:
    return PendingCall(
        id=call_id, method="ui.ask", params={"q": 1}, agent="a", instance_key="k",
        tool_name="t__ask", turn_id="t1", event=msgspec.to_builtins(event or started()),
        created_at=NOW - 10, expires_at=expires_at,
    )  # fmt: skip


def write(layout: StateLayout, call: PendingCall) -> Path:
    directory = layout.instance_paths(SWARM, call.instance_key, call.agent).pending_calls_dir
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{call.id}.json"
    path.write_bytes(msgspec.json.encode(call))
    return path


def index(router: Router, tmp_path: Path, targets: FakeTargets | None = None) -> DeferredIndex:
    layout = StateLayout.from_env(tmp_path / "state")
    return DeferredIndex(
        router, targets or FakeTargets(), layout, SWARM, clock=lambda: NOW, view=swarm_of()
    )


async def test_list_shows_pending_calls_only(router: Router, tmp_path: Path) -> None:
    idx = index(router, tmp_path)
    live = write(idx.layout, pending("live"))
    write(idx.layout, pending("old", expires_at=NOW - 1))
    write(idx.layout, pending("done"))
    idx.book.record(pending("done"), answer_of("done", 1, None, None, None), NOW)
    # an answer file beside a call (an agent can write one) neither answers nor hides it
    live.with_name("live" + ANSWER_SUFFIX).write_bytes(b'{"jsonrpc": "2.0", "id": "live"}')
    [row] = await idx.list()
    assert (row["id"], row["agent"], row["instanceKey"], row["method"]) == ("live", "a", "k",
                                                                             "ui.ask")  # fmt: skip
    assert (row["ageSeconds"], row["expiresInSeconds"]) == (10, 60)
    assert row["request"] == {"jsonrpc": "2.0", "id": "live", "method": "ui.ask",
                              "params": {"q": 1}}  # fmt: skip


def test_one_instances_pending_calls_are_read_from_its_own_directory(
    router: Router, tmp_path: Path
) -> None:
    idx = index(router, tmp_path)
    write(idx.layout, pending("live"))
    write(idx.layout, pending("old", expires_at=NOW - 1))
    other = msgspec.structs.replace(pending("elsewhere"), instance_key="other")
    write(idx.layout, other)
    assert [c.id for c in idx.pending_for(agent_address("a", "k"))] == ["live"]
    assert idx.pending_for(agent_address("a", "nobody")) == []  # no directory: no call


async def test_submit_hands_the_request_to_the_waiting_control_client(
    router: Router, tmp_path: Path
) -> None:
    idx = index(router, tmp_path)
    event = started()
    waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
    router.book.open(OpenRequest(correlation_id="corr", requester="control",
                                 server=None, event_id=event.id, waiter=waiter))  # fmt: skip
    entry = router.table.entry(agent_address("a", "k"))
    args = {"call": msgspec.to_builtins(pending("c1", event=event))}
    idx.on_call(entry, CallPayload(call_id="c1", op=CallOp.DEFERRED_SUBMIT, args=args))
    notice = await asyncio.wait_for(waiter, 5)
    assert notice.metadata["deferred"]["id"] == "c1"
    assert "goondan calls resolve c1" in notice.input


async def test_resolve_stores_the_answer_starts_the_agent_and_waits_for_the_reply(
    router: Router, tmp_path: Path
) -> None:
    targets = FakeTargets()
    idx = index(router, tmp_path, targets)
    event = started()
    path = write(idx.layout, pending("c1", event=event))
    resolving = asyncio.ensure_future(
        idx.resolve("c1", answer_of("c1", None, -32002, None, None), 5, who=OPERATOR)
    )
    await asyncio.sleep(0)  # one loop turn: resolve runs up to its wait (no I/O in between)
    [answered] = idx.book.of(agent_address("a", "k"))  # the daemon's record, not the agent's
    answer = answered.answer
    assert answer.error is not None and answer.error.code == -32002
    assert not path.with_name("c1" + ANSWER_SUFFIX).exists()
    assert targets.ensured == [agent_address("a", "k")]
    reply = response_to(event, source=CLI, text="resumed")
    router.respond(reply)
    assert (await asyncio.wait_for(resolving, 5)).input == "resumed"
    assert await idx.list() == []


async def test_resolve_of_an_unknown_call_is_a_coded_error(router: Router, tmp_path: Path) -> None:
    idx = index(router, tmp_path)
    write(idx.layout, pending("old", expires_at=NOW - 1))
    for call_id in ("nope", "old"):
        with pytest.raises(DeferredCallError) as info:
            async with asyncio.timeout(5):
                await idx.resolve(call_id, answer_of(call_id, 1, None, None, None), 1,
                                  who=OPERATOR)  # fmt: skip
        assert info.value.code == "E_CALL_NOT_FOUND"


def test_answer_of() -> None:
    assert answer_of("c", {"a": 1}, None, None, None) == JsonRpcResponse(id="c", result={"a": 1})
    error = answer_of("c", None, -32001, None, {"d": 1}).error
    assert error is not None and (error.code, error.data) == (-32001, {"d": 1})
    assert error.message == "client error -32001"


# -- what the index asks of its broker and targets (fakes of both) ----------------------------

A = agent_address("a", "k")
HOOK = "connector:hook:webhook"
HOOKED = Answerer(via="connector:hook", by="", connector=parse_address(HOOK))


def from_connector(correlation_id: str = "corr") -> AgentEvent:
    source = Source(kind=SourceKind.CONNECTOR, name="hook")
    reply_to = ReplyTo(target=HOOK, correlation_id=correlation_id)
    return new_event(type="ticket", input="hi", instance_key="k", source=source,
                     reply_to=reply_to)  # fmt: skip


def faked(tmp_path: Path, broker: FakeBroker, targets: FakeTargets | None = None) -> DeferredIndex:
    layout = StateLayout.from_env(tmp_path / "state")
    return DeferredIndex(
        broker, targets or FakeTargets(), layout, SWARM, clock=lambda: NOW, view=swarm_of()
    )


def pokes(broker: FakeBroker) -> list[str]:
    """The `deferred_resolve` calls sent, by call id (each carries its answer)."""
    found = []
    for _, msg in broker.sent:
        assert isinstance(msg, Call) and msg.payload.op is CallOp.DEFERRED_RESOLVE
        answer = msgspec.convert(msg.payload.args["answer"], JsonRpcResponse)
        assert answer.id == msg.payload.args["id"]
        found.append(msg.payload.args["id"])
    return found


def test_a_submit_notifies_the_client_and_keeps_its_request_open(tmp_path: Path) -> None:
    broker = FakeBroker()
    idx = faked(tmp_path, broker)
    event = from_connector()
    args = {"call": msgspec.to_builtins(pending("c1", event=event))}
    idx.on_call(ProcessEntry(address=A), CallPayload(call_id="x", op=CallOp.DEFERRED_SUBMIT,
                                                     args=args))  # fmt: skip
    [notice] = broker.interim  # not `respond`: the resumed turn's reply comes later
    assert (notice.in_reply_to, notice.metadata["pendingCall"]) == ("corr", "c1")
    assert broker.responses == []


async def test_resolving_for_a_ready_process_reopens_the_request_and_pokes_it(
    tmp_path: Path,
) -> None:
    broker = FakeBroker(ready_entries={A: ProcessEntry(address=A, status=S.IDLE, generation=1)})
    targets = FakeTargets()
    idx = faked(tmp_path, broker, targets)
    write(idx.layout, pending("c1", event=from_connector()))
    async with asyncio.timeout(5):
        result = await idx.resolve("c1", answer_of("c1", {"ok": 1}, None, None, None), 5,
                                   who=OPERATOR)  # fmt: skip
    assert result == {"resolved": "c1", "agent": "a", "instanceKey": "k"}
    [request] = broker.opened  # the connector gets the resumed turn's reply
    assert (request.correlation_id, request.requester, request.server) == ("corr", HOOK, A)
    assert pokes(broker) == ["c1"]
    assert targets.ensured == []
    # answered elsewhere (the CLI): the reply is passed on to the connector, naming the call
    hook = ProcessEntry(address=parse_address(HOOK), status=S.IDLE, generation=1)
    broker.ready_entries[hook.address] = hook
    assert request.waiter is not None
    reply = response_to(from_connector(), source=Source(kind=SourceKind.AGENT, name="a"), text="ok")
    request.waiter.set_result(reply)
    await asyncio.sleep(0)  # the done callback runs on the loop
    [passed] = [m for e, m in broker.sent if e is hook]
    assert isinstance(passed, Event) and passed.payload.input == "ok"
    assert passed.payload.metadata[RESUMED_CALL] == "c1"


async def test_a_connector_answering_its_own_turns_call_gets_no_second_copy(
    tmp_path: Path,
) -> None:
    broker = FakeBroker(ready_entries={A: ProcessEntry(address=A, status=S.IDLE, generation=1)})
    idx = faked(tmp_path, broker, FakeTargets())
    write(idx.layout, pending("c1", event=from_connector()))
    async with asyncio.timeout(5):
        resolving = asyncio.ensure_future(idx.resolve(
            "c1", answer_of("c1", {"ok": 1}, None, None, None), 5, wait=True, who=HOOKED
        ))  # fmt: skip
        await asyncio.sleep(0)
        [request] = broker.opened
        assert request.waiter is not None
        reply = response_to(from_connector(), source=Source(kind=SourceKind.AGENT, name="a"),
                            text="ok")  # fmt: skip
        request.waiter.set_result(reply)
        assert (await resolving).input == "ok"  # the answering connector's own wait
    assert [m for _, m in broker.sent if isinstance(m, Event)] == []


async def test_resolving_for_a_stopped_process_starts_it_and_pokes_it_once_ready(
    tmp_path: Path,
) -> None:
    broker, targets = FakeBroker(), FakeTargets()
    idx = faked(tmp_path, broker, targets)
    path = write(idx.layout, pending("c1", event=from_connector()))
    async with asyncio.timeout(5):
        await idx.resolve("c1", answer_of("c1", None, -32002, None, None), 5, who=OPERATOR)
    assert (targets.ensured, pokes(broker)) == ([A], [])
    broker.ready_entries[A] = ProcessEntry(address=A, status=S.IDLE, generation=1)
    idx.on_ready(A)
    assert pokes(broker) == ["c1"]
    idx.on_ready(A)  # a next process (the first died before the result was written) too
    assert pokes(broker) == ["c1", "c1"]
    path.unlink()  # the result is in the conversation: the agent removed the call
    idx.on_ready(A)
    assert pokes(broker) == ["c1", "c1"] and not idx.book.has_any(A)


async def test_an_approval_is_handed_over_once(tmp_path: Path) -> None:
    """Spent when handed: a process that took it and died does not get it again."""
    broker, targets = FakeBroker(), FakeTargets()
    idx = faked(tmp_path, broker, targets)
    call = msgspec.structs.replace(pending("c1", event=from_connector()), method=APPROVE_METHOD)
    write(idx.layout, call)
    async with asyncio.timeout(5):
        await idx.decide("c1", True, None, 5, who=OPERATOR)
    broker.ready_entries[A] = ProcessEntry(address=A, status=S.IDLE, generation=1)
    idx.on_ready(A)
    idx.on_ready(A)
    assert pokes(broker) == ["c1"] and not idx.book.has_any(A)
    [_, msg] = broker.sent[0]
    assert isinstance(msg, Call)
    assert msg.payload.args["answer"]["result"]["by"] == OPERATOR.by
    assert [row["id"] for row in await idx.list()] == ["c1"]  # undecided again, if not taken


async def test_a_call_whose_agent_cannot_run_here_is_kept_for_later(tmp_path: Path) -> None:
    refused = ErrorInfo(code=ErrorCode.E_AGENT_NOT_IN_SWARM, message="a left the swarm")
    broker = FakeBroker()
    idx = faked(tmp_path, broker, FakeTargets(refused={A: refused}))
    path = write(idx.layout, pending("c1"))
    with pytest.raises(DeferredCallError) as info:
        async with asyncio.timeout(5):
            await idx.resolve("c1", answer_of("c1", 1, None, None, None), 5, who=OPERATOR)
    assert info.value.code == ErrorCode.E_AGENT_NOT_IN_SWARM
    assert not idx.book.has(A, "c1") and path.exists()
    assert [row["id"] for row in await idx.list()] == ["c1"]
    assert (broker.opened, broker.sent) == ([], [])


def test_resume_answered_starts_the_instances_that_can_run_here(tmp_path: Path) -> None:
    b = agent_address("b", "k")
    targets = FakeTargets(refused={b: ErrorInfo(code=ErrorCode.E_AGENT_NOT_IN_SWARM, message="")})
    idx = faked(tmp_path, FakeBroker(), targets)
    for call in (pending("c1"), msgspec.structs.replace(pending("c2"), agent="b")):
        write(idx.layout, call)
        idx.book.record(call, answer_of(call.id, 1, None, None, None), NOW)
    gone = msgspec.structs.replace(pending("c3"), instance_key="gone")  # its turn took it
    idx.book.record(gone, answer_of("c3", 1, None, None, None), NOW)
    assert idx.resume_answered() == [A]
    assert not idx.book.has_any(agent_address("a", "gone"))
    assert targets.ensured == [A]


def test_a_process_cannot_submit_another_instances_call(tmp_path: Path) -> None:
    """`deferred_submit` took any call: a process could put a request of another instance in
    front of that instance's client."""
    broker = FakeBroker()
    idx = faked(tmp_path, broker)
    args = {"call": msgspec.to_builtins(pending("c1", event=from_connector()))}  # agent a, key k
    for other in (agent_address("a", "other"), agent_address("b", "k")):
        idx.on_call(ProcessEntry(address=other), CallPayload(call_id="x",
                    op=CallOp.DEFERRED_SUBMIT, args=args))  # fmt: skip
    assert broker.interim == [] and "c1" not in idx.calls
    idx.on_call(ProcessEntry(address=A), CallPayload(call_id="x", op=CallOp.DEFERRED_SUBMIT,
                                                     args=args))  # fmt: skip
    assert "c1" in idx.calls
