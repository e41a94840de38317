"""Who may answer a deferred call (orchestrator/calls/auth.py, ARCHITECTURE.md §10), and that the
index records who goondan says answered, never who the answer says (issue 27 F1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from orchestrator.calls import auth as call_auth
from orchestrator.calls.auth import Answerer
from orchestrator.calls.deferred import DeferredCallError, DeferredIndex
from orchestrator.supervision.states import ProcessStatus as S
from orchestrator.supervision.table import ProcessEntry
from orchestrator.swarm.view import approver_names
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from protocol.events import ReplyTo, Source, SourceKind, new_event
from protocol.ids import Address, agent_address, parse_address
from protocol.jsonrpc import ANSWERED_BY, APPROVE_METHOD, JsonRpcResponse, PendingCall
from protocol.messages import Call
from tests.unit.orchestrator.fakes import FakeBroker, FakeTargets, swarm_of

NOW = 1000.0
HOOK = parse_address("connector:hook:webhook")
API = parse_address("connector:edge:api")
A = agent_address("a", "k")


def call(method: str = "ui.ask", origin: str = str(HOOK), call_id: str = "c1") -> PendingCall:
    source = Source(kind=SourceKind.CONNECTOR, name="hook")
    event = new_event(type="m", input="hi", instance_key="k", source=source,
                      reply_to=ReplyTo(target=origin, correlation_id="corr"))  # fmt: skip
    return PendingCall(id=call_id, method=method, agent="a", instance_key="k", tool_name="t__x",
                       turn_id="t", event=msgspec.to_builtins(event), created_at=NOW - 1,
                       expires_at=NOW + 60)  # fmt: skip


def via(connector: Address = HOOK, by: str = "", instance: Address | None = None,
        approvers: frozenset[str] = frozenset()) -> Answerer:  # fmt: skip
    return Answerer(via="connector:x", by=by, connector=connector, instance=instance,
                    approvers=approvers)  # fmt: skip


@pytest.mark.parametrize(
    ("pending", "who", "allowed"),
    [
        (call(), call_auth.operator("cli", None), True),  # an operator answers anything
        (call(APPROVE_METHOD), call_auth.operator("studio", 0), True),
        (call(), via(HOOK), True),  # the Connection that received the call
        (call(), via(API), False),  # another Connection
        (call(origin="control"), via(HOOK), False),  # a CLI's turn: not a connector's to answer
        (call(), via(HOOK, instance=agent_address("a", "other")), False),  # another instance
        (call(), via(HOOK, instance=A), True),
        (call(APPROVE_METHOD), via(HOOK), False),  # the receiving Connection is no approver
        (call(APPROVE_METHOD), via(API, by="ops"), False),  # a principal not listed
        (call(APPROVE_METHOD), via(API, by="ops", approvers=frozenset({"ops"})), True),
        (call(APPROVE_METHOD), via(API, by="", approvers=frozenset({""})), False),
        (  # an approver, for another instance than its request's
            call(APPROVE_METHOD),
            via(API, by="ops", instance=agent_address("a", "o"), approvers=frozenset({"ops"})),
            False,
        ),
    ],
)
def test_who_may_answer(pending: PendingCall, who: Answerer, allowed: bool) -> None:
    assert (call_auth.refusal(pending, who) is None) is allowed


def test_approvers_as_written() -> None:
    assert approver_names("7, ann ,") == frozenset({"7", "ann"})
    assert approver_names(["U1", " ", 3]) == frozenset({"U1"})
    assert approver_names(None) == frozenset()
    assert approver_names(object()) == frozenset()  # a ValueSource names no one


def test_a_connectors_answer_is_its_connection_and_principal_not_its_payload() -> None:
    source = Source(kind=SourceKind.CONNECTOR, name="someone-else")
    event = new_event(type="deferred.answer", input="", instance_key="x", source=source,
                      metadata={ANSWERED_BY: "ops", "rpc": {}})  # fmt: skip
    who = call_auth.from_connector(API, event, "agent:a:k", frozenset({"ops"}))
    assert (who.via, who.by, who.connector, who.instance) == ("connector:edge", "ops", API, A)
    assert call_auth.from_connector(API, event, "orchestrator", frozenset()).instance is None


def test_os_user() -> None:
    assert call_auth.os_user(0) == "root"
    assert call_auth.os_user(None) == "unknown"
    assert call_auth.os_user(2**31 - 7).startswith("uid:")


async def test_the_record_names_goondans_who_not_the_answers(tmp_path: Path) -> None:
    broker = FakeBroker(ready_entries={A: ProcessEntry(address=A, status=S.IDLE, generation=1)})
    layout = StateLayout.from_env(tmp_path / "state")
    idx = DeferredIndex(broker, FakeTargets(), layout, "s", clock=lambda: NOW, view=swarm_of())
    pending = call(APPROVE_METHOD)
    directory = layout.instance_paths("s", "k", "a").pending_calls_dir
    directory.mkdir(parents=True)
    (directory / "c1.json").write_bytes(msgspec.json.encode(pending))
    forged = JsonRpcResponse(id="c1", result={"approved": True, "by": "root-operator",
                                              "via": "cli"})  # fmt: skip
    async with asyncio.timeout(5):
        with pytest.raises(DeferredCallError) as info:
            await idx.resolve("c1", forged, 5, who=via(API, by="mallory"))
        assert info.value.code == ErrorCode.E_CALL_FORBIDDEN
        assert not idx.book.has_any(A) and broker.sent == []
        approver = via(API, by="ops", approvers=frozenset({"ops"}))
        await idx.resolve("c1", forged, 5, who=approver)
    assert not idx.book.has_any(A)  # handed over already: an approval is spent then
    [(_, frame)] = broker.sent
    assert isinstance(frame, Call)
    record = frame.payload.args["answer"]["result"]
    assert (record["approved"], record["by"], record["via"]) == (True, "ops", "connector:x")


def test_a_pending_file_naming_another_instance_is_not_its_call(tmp_path: Path) -> None:
    """An agent writes its own `pending-calls/`: a file there naming another instance must
    not put a request of that instance in front of the operator."""
    layout = StateLayout.from_env(tmp_path / "state")
    idx = DeferredIndex(
        FakeBroker(), FakeTargets(), layout, "s", clock=lambda: NOW, view=swarm_of()
    )
    mine = layout.instance_paths("s", "mine", "a").pending_calls_dir
    mine.mkdir(parents=True)
    (mine / "c1.json").write_bytes(msgspec.json.encode(call()))  # says a@k, lies in a@mine
    idx.scan()
    assert idx.calls == {}
