"""A process that dies while its turn is suspended on a deferred call (ARCHITECTURE.md §10, issue
9).

The child saves the pending call to disk, then submits it. Found by the chaos suite: when the
process is SIGKILLed after the save and before the orchestrator handled the submit (the frame
was lost, or the exit was seen first), the waiting client was told E_AGENT_CRASHED although
the turn lives on disk. The next process resumed it and waited an hour for an answer nobody
knew to give, holding every later event of that instance. Now the client gets the call's
request instead, and `calls list` shows it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq.asyncio

from orchestrator.calls.deferred import DeferredIndex
from orchestrator.routing.relay import Relay
from orchestrator.routing.router import Router
from orchestrator.supervision.mailboxes import OpenRequest
from orchestrator.supervision.table import ProcessTable
from protocol.endpoints import StateLayout
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event
from protocol.ids import agent_address
from protocol.jsonrpc import ANSWER_SUFFIX, JsonRpcResponse, PendingCall
from tests.unit.orchestrator.fakes import FakeLifecycle, build_router, swarm_of

NOW = 1000.0
SWARM = "s"
SERVER = agent_address("a", "k")


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    ctx = zmq.asyncio.Context()
    relay, lifecycle = Relay(), FakeLifecycle()
    index = DeferredIndex(relay, lifecycle, StateLayout.from_env(tmp_path / "state"), SWARM,
                          clock=lambda: NOW, view=swarm_of())  # fmt: skip
    r = build_router(ctx, f"ipc://{tmp_path}/a.sock", ProcessTable(), lifecycle, relay=relay,
                     suspended=index)  # fmt: skip
    yield r
    r.close()
    ctx.term()


def deferred(router: Router) -> DeferredIndex:
    index = router.services.suspended
    assert isinstance(index, DeferredIndex)
    return index


def request(correlation_id: str) -> AgentEvent:
    reply_to = ReplyTo(target="control", correlation_id=correlation_id)
    source = Source(kind=SourceKind.CLI, name="goondan")
    return new_event(type="user.message", input="ask", instance_key="k", source=source,
                     reply_to=reply_to)  # fmt: skip


def save_pending(router: Router, call_id: str, event: AgentEvent) -> PendingCall:
    """What the child does before it submits the call."""
    call = PendingCall(
        id=call_id, method="ui.ask", params={}, agent="a", instance_key="k", tool_name="t__ask",
        turn_id="t1", event=msgspec.to_builtins(event), created_at=NOW, expires_at=NOW + 60,
    )  # fmt: skip
    paths = deferred(router).layout.instance_paths(SWARM, "k", "a")
    paths.pending_calls_dir.mkdir(parents=True)
    (paths.pending_calls_dir / f"{call_id}.json").write_bytes(msgspec.json.encode(call))
    return call


def running(router: Router, event: AgentEvent) -> asyncio.Future[AgentEvent]:
    """`event` is in flight to the process of SERVER, and a control client waits on it."""
    assert event.reply_to is not None
    waiter = asyncio.get_running_loop().create_future()
    router.book.open(OpenRequest(correlation_id=event.reply_to.correlation_id,
                                 requester="control", server=SERVER, event_id=event.id,
                                 waiter=waiter))  # fmt: skip
    box = router.mailbox(SERVER)
    box.queue.append(event)
    box.take()
    box.mark_started(event.id)
    return waiter


async def test_death_after_the_save_hands_the_call_to_the_client(router: Router) -> None:
    event = request("corr")
    waiter = running(router, event)
    save_pending(router, "call_1", event)
    router.on_process_dead(router.table.entry(SERVER), "SIGKILL")
    notice = waiter.result()
    assert notice.error is None
    assert notice.metadata["deferred"]["id"] == "call_1"
    assert [row["id"] for row in await deferred(router).list()] == ["call_1"]


async def test_death_of_an_ordinary_turn_is_retried_once_then_a_crash(router: Router) -> None:
    event = request("corr")
    waiter = running(router, event)
    save_pending(router, "call_1", request("another"))  # a call of another turn
    entry = router.table.entry(SERVER)
    router.on_process_dead(entry, "SIGKILL")
    assert not waiter.done()  # the replacement resumes the turn
    box = router.mailbox(SERVER)
    assert list(box.queue) == [event]
    box.take()
    box.mark_started(event.id)
    router.on_process_dead(entry, "SIGKILL")  # it died running it again: a poison event
    error = waiter.result().error
    assert error is not None and error.code == "E_AGENT_CRASHED"


async def test_death_after_the_answer_keeps_the_resolver_waiting(router: Router) -> None:
    """Answered, the process died before taking the answer: the respawned process resumes
    the turn, so the resolving client waits for its reply (no notice, no crash)."""
    event = request("corr")
    waiter = running(router, event)
    call = save_pending(router, "call_1", event)
    deferred(router).book.record(call, JsonRpcResponse(id="call_1", result=1), NOW)
    router.on_process_dead(router.table.entry(SERVER), "SIGKILL")
    assert not waiter.done()


async def test_an_answer_file_the_agent_wrote_is_not_an_answer(router: Router) -> None:
    """A call with `<id>.answer.json` beside it was taken as answered (and the next process
    read the file): the agent's own tools could answer, or approve, its calls (issue 27 F2)."""
    event = request("corr")
    waiter = running(router, event)
    save_pending(router, "call_1", event)
    pending_dir = deferred(router).layout.instance_paths(SWARM, "k", "a").pending_calls_dir
    forged = b'{"jsonrpc": "2.0", "id": "call_1", "result": {"approved": true}}'
    (pending_dir / f"call_1{ANSWER_SUFFIX}").write_bytes(forged)
    router.on_process_dead(router.table.entry(SERVER), "SIGKILL")
    notice = waiter.result()  # the client is asked again: the call is still unanswered
    assert notice.metadata["deferred"]["id"] == "call_1"
    assert [row["id"] for row in await deferred(router).list()] == ["call_1"]


async def test_death_sweeps_an_answer_whose_call_is_gone(router: Router) -> None:
    """The child removes a taken call's file once its result is written: the daemon's
    record of the answer goes at the next death (or ready) of the instance."""
    event = request("corr")
    waiter = running(router, event)
    call = save_pending(router, "call_1", event)
    index = deferred(router)
    index.book.record(call, JsonRpcResponse(id="call_1", result=1), NOW)
    pending_dir = index.layout.instance_paths(SWARM, "k", "a").pending_calls_dir
    (pending_dir / "call_1.json").unlink()
    router.on_process_dead(router.table.entry(SERVER), "SIGKILL")
    assert not index.book.has_any(SERVER)
    assert list(index.book.dir.rglob("*.json")) == []
    # the answer was taken, the turn died: as any turn cut by a death, the next process
    # resumes it (a second death answers E_AGENT_CRASHED)
    assert not waiter.done()
    assert list(router.mailbox(SERVER).queue) == [event]


async def test_an_agents_own_deferred_answer_event_answers_nothing(router: Router) -> None:
    """The router took a `deferred.answer` event from any process: an agent could send one
    (the agents tool names an event's type and metadata) and approve its own call."""
    event = request("corr")
    call = save_pending(router, "call_1", event)
    forged = new_event(type="deferred.answer", input="", instance_key="k",
                       source=Source(kind=SourceKind.AGENT, name="a"),
                       metadata={"rpc": {"jsonrpc": "2.0", "id": "call_1",
                                         "result": {"approved": True}}})  # fmt: skip
    router._on_child_event(router.table.entry(SERVER), "orchestrator", forged)
    await asyncio.sleep(0)  # an answer is resolved in a task: it would have started by now
    index = deferred(router)
    assert not index.book.has(SERVER, call.id)
    assert [row["id"] for row in await index.list()] == ["call_1"]
