"""The daemon's pending-call index: scan, list, client notice, resolution routing (ARCHITECTURE.md
§10)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq.asyncio

from orchestrator.deferred_calls import DeferredCallError, DeferredIndex, answer_of
from orchestrator.delivery import OpenRequest
from orchestrator.router import Router
from orchestrator.table import ProcessTable
from protocol.endpoints import StateLayout
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event, response_to
from protocol.ids import Address, agent_address
from protocol.jsonrpc import ANSWER_SUFFIX, JsonRpcResponse, PendingCall
from protocol.messages import CallOp, CallPayload

NOW = 1000.0
SWARM = "s"
CLI = Source(kind=SourceKind.CLI, name="goondan")


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    ctx = zmq.asyncio.Context()
    r = Router(ctx, f"ipc://{tmp_path}/a.sock", ProcessTable())
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


def index(router: Router, tmp_path: Path, ensured: list[Address]) -> DeferredIndex:
    layout = StateLayout.from_env(tmp_path / "state")
    return DeferredIndex(router, layout, SWARM, ensured.append, clock=lambda: NOW)


def test_list_shows_pending_calls_only(router: Router, tmp_path: Path) -> None:
    idx = index(router, tmp_path, [])
    write(idx.layout, pending("live"))
    write(idx.layout, pending("old", expires_at=NOW - 1))
    answered = write(idx.layout, pending("done"))
    answered.with_name("done" + ANSWER_SUFFIX).write_bytes(b"{}")
    [row] = idx.list()
    assert (row["id"], row["agent"], row["instanceKey"], row["method"]) == ("live", "a", "k",
                                                                             "ui.ask")  # fmt: skip
    assert (row["ageSeconds"], row["expiresInSeconds"]) == (10, 60)
    assert row["request"] == {"jsonrpc": "2.0", "id": "live", "method": "ui.ask",
                              "params": {"q": 1}}  # fmt: skip


async def test_submit_hands_the_request_to_the_waiting_control_client(
    router: Router, tmp_path: Path
) -> None:
    idx = index(router, tmp_path, [])
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
    ensured: list[Address] = []
    idx = index(router, tmp_path, ensured)
    event = started()
    path = write(idx.layout, pending("c1", event=event))
    resolving = asyncio.ensure_future(
        idx.resolve("c1", answer_of("c1", None, -32002, None, None), 5)
    )
    await asyncio.sleep(0)  # one loop turn: resolve runs up to its wait (no I/O in between)
    answer = msgspec.json.decode(path.with_name("c1" + ANSWER_SUFFIX).read_bytes(),
                                 type=JsonRpcResponse)  # fmt: skip
    assert answer.error is not None and answer.error.code == -32002
    assert ensured == [agent_address("a", "k")]
    reply = response_to(event, source=CLI, text="resumed")
    router.respond(reply)
    assert (await asyncio.wait_for(resolving, 5)).input == "resumed"
    assert idx.list() == []


async def test_resolve_of_an_unknown_call_is_a_coded_error(router: Router, tmp_path: Path) -> None:
    idx = index(router, tmp_path, [])
    write(idx.layout, pending("old", expires_at=NOW - 1))
    for call_id in ("nope", "old"):
        with pytest.raises(DeferredCallError) as info:
            async with asyncio.timeout(5):
                await idx.resolve(call_id, answer_of(call_id, 1, None, None, None), 1)
        assert info.value.code == "E_CALL_NOT_FOUND"


def test_answer_of() -> None:
    assert answer_of("c", {"a": 1}, None, None, None) == JsonRpcResponse(id="c", result={"a": 1})
    error = answer_of("c", None, -32001, None, {"d": 1}).error
    assert error is not None and (error.code, error.data) == (-32001, {"d": 1})
    assert error.message == "client error -32001"
