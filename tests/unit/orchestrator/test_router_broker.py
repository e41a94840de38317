"""The router as the broker of its collaborators (`orchestrator.routing.broker`): the relay they
reach it through, and the request operations that answer a request in steps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import zmq.asyncio
from structlog.testing import capture_logs

from orchestrator.routing.placement import LocalPlacement
from orchestrator.routing.relay import Relay, RelayNotConnected
from orchestrator.supervision.mailboxes import OpenRequest
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.codec import decode_message, encode
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event, response_to
from protocol.ids import ORCHESTRATOR, agent_address
from protocol.messages import (
    Call,
    CallOp,
    CallPayload,
    CallResult,
    History,
    HistoryPayload,
    ShutdownAck,
    ShutdownAckPayload,
)
from tests.unit.orchestrator.conftest import Routed
from tests.unit.orchestrator.fakes import FakeLifecycle, build_router

SOURCE = Source(kind=SourceKind.CLI, name="goondan")


def request(requester: str) -> AgentEvent:
    reply_to = ReplyTo(target=requester, correlation_id="corr")
    return new_event(type="ask", input="?", instance_key="k", source=SOURCE, reply_to=reply_to)


def test_the_relay_reaches_the_router_its_constructor_connected_once(tmp_path: Path) -> None:
    """Collaborators built before the router hold the relay: using it before the router
    exists is a wiring bug that says so; the router's constructor connects it, once."""
    ctx = zmq.asyncio.Context()
    relay, table = Relay(), ProcessTable()
    entry = table.entry(agent_address("a", "k"))
    entry.generation, entry.status = 1, ProcessStatus.IDLE
    with pytest.raises(RelayNotConnected):
        relay.ready(entry.address)
    router = build_router(ctx, f"ipc://{tmp_path}/a.sock", table, FakeLifecycle(), relay=relay)
    try:
        assert relay.ready(entry.address) is entry  # the router's answer, through the relay
        event = request("control")
        relay.submit(event, entry.address)
        assert [e.id for e in router.mailbox(entry.address).queue] == [event.id]  # no peer yet
        with pytest.raises(RuntimeError, match="once"):
            relay.connect(router)
    finally:
        router.close()
        ctx.term()


async def test_an_interim_response_ends_a_waiters_wait(routed: Routed) -> None:
    event = request("control")
    waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
    opened = OpenRequest(correlation_id="corr", requester="control", server=None,
                         event_id=event.id, waiter=waiter)  # fmt: skip
    routed.router.open_request(opened)
    notice = response_to(event, source=SOURCE, text="first")
    routed.router.respond_interim(notice)
    async with asyncio.timeout(5):
        assert await waiter is notice
    assert routed.router.book.get("corr") is opened


def test_an_interim_response_to_a_process_keeps_its_request_open(routed: Routed) -> None:
    event = request("connector:hook:webhook")
    opened = OpenRequest(correlation_id="corr", requester="connector:hook:webhook",
                         server=None, event_id=event.id)  # fmt: skip
    routed.router.open_request(opened)
    routed.router.respond_interim(response_to(event, source=SOURCE, text="first"))
    assert routed.router.book.get("corr") is opened
    routed.router.respond(response_to(event, source=SOURCE, text="final"))
    assert routed.router.book.get("corr") is None


async def test_a_drained_process_whose_exit_is_seen_first_crashes_nothing(
    routed: Routed,
) -> None:
    """Under load the pidfd of a drained child can fire before its last frames are read: its
    exit blamed the oldest event it held (an E_AGENT_CRASHED to a caller whose event had not
    started) and its `shutdown_ack` was dropped as stale."""
    kept = request("control")
    waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
    opened = OpenRequest(correlation_id="corr", requester="control",
                         server=routed.entry.address, event_id=kept.id, waiter=waiter)  # fmt: skip
    routed.router.open_request(opened)
    box = routed.router.mailbox(routed.entry.address)
    box.queue.append(kept)
    assert box.take() == [kept]  # delivered, never started
    routed.entry.status = ProcessStatus.DRAINING
    routed.router.on_process_dead(routed.entry, "exited")
    assert list(box.queue) == [kept]  # for the next process
    assert not waiter.done()  # nobody was answered with a crash
    routed.entry.status = ProcessStatus.TERMINATED
    peer = routed.peer()
    ack = ShutdownAck(from_=routed.entry.id_text, to=ORCHESTRATOR,
                      payload=ShutdownAckPayload(undelivered_events=[kept.id]))  # fmt: skip
    await peer.send(encode(ack))
    async with asyncio.timeout(5):
        assert (await routed.lifecycle.acks.get()).undelivered_events == [kept.id]
    assert list(box.queue) == [kept]
    peer.close()


async def test_a_no_wait_send_is_no_request_while_nobody_waits(routed: Routed) -> None:
    """A `send --no-wait` carries `replyTo` only so `--attach` can read its reply later: an
    agent in crash-loop backoff keeps it queued (as any event) instead of failing it at once,
    where the chaos run saw accepted events fail with no one told and nothing logged."""
    router, address = routed.router, routed.entry.address
    routed.entry.status = ProcessStatus.CRASH_LOOP_BACKOFF
    no_wait = request("control")
    router.submit(no_wait, address)
    waiting = new_event(type="ask", input="!", instance_key="k", source=SOURCE,
                        reply_to=ReplyTo(target="control", correlation_id="waited"))  # fmt: skip
    waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
    router.submit(waiting, address, waiter)
    assert routed.lifecycle.checked == [(address, False), (address, True)]
    backoff = ErrorInfo(code=ErrorCode.E_AGENT_BACKOFF, message="backing off")
    with capture_logs() as logs:
        assert router.fail_queued(address, backoff, requests_only=True) == 1
    assert list(router.mailbox(address).queue) == [no_wait]
    assert waiter.result().error == backoff
    assert not [line for line in logs if line["event"] == "event_dropped"]


def test_a_crashed_event_nobody_waits_for_is_logged_and_answered(routed: Routed) -> None:
    """Its error is still its reply (the journal keeps it for `goondan send --attach`)."""
    router, entry = routed.router, routed.entry
    entry.status = ProcessStatus.SPAWNING  # queued, then taken as a process would get it
    no_wait = request("control")
    router.submit(no_wait, entry.address)
    assert router.book.get("corr") is not None
    box = router.mailbox(entry.address)
    assert [e.id for e in box.take()] == [no_wait.id]
    with capture_logs() as logs:
        router.on_process_dead(entry, "signal 9")  # retried once: the next process resumes it
        assert [e.id for e in box.take()] == [no_wait.id]
        router.on_process_dead(entry, "signal 9")
    [retried] = [line for line in logs if line["event"] == "event_retried"]
    assert retried["event_id"] == no_wait.id
    [dropped] = [line for line in logs if line["event"] == "event_dropped"]
    assert dropped["event_id"] == no_wait.id and dropped["code"] == ErrorCode.E_AGENT_CRASHED
    assert router.book.get("corr") is None  # answered: respond() closed its request


async def test_the_history_lines_of_a_process_whose_exit_is_seen_first_are_kept(
    tmp_path: Path,
) -> None:
    """Cluster mode: the pidfd can fire before a child's last `history` frames are read. They
    are the conversation lines of its last turn, already in the node's files: they still go
    to the history stream (a frame of an older generation stays stale)."""
    table = ProcessTable()
    entry = table.entry(agent_address("a", "k"))
    entry.generation, entry.status = 2, ProcessStatus.TERMINATED
    ctx = zmq.asyncio.Context()
    lines: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

    class KeepsHistory(LocalPlacement):
        def history(self, written: ProcessEntry, line: bytes) -> bool:
            lines.put_nowait((written.generation, line))
            return True

    relay = Relay()
    router = build_router(ctx, f"ipc://{tmp_path}/agents.sock", table, FakeLifecycle(),
                          relay=relay, placement=KeepsHistory(relay.deliver_response))  # fmt: skip
    task = asyncio.ensure_future(router.run())
    peer = ctx.socket(zmq.DEALER)
    try:
        peer.setsockopt(zmq.IDENTITY, entry.routing_id)
        peer.setsockopt(zmq.LINGER, 0)
        peer.connect(f"ipc://{tmp_path}/agents.sock")
        frame = History(from_=entry.id_text, to=ORCHESTRATOR, payload=HistoryPayload(line=b"l\n"))
        await peer.send(encode(frame))
        async with asyncio.timeout(5):
            assert await lines.get() == (2, b"l\n")
        assert router.stats.stale == 0
    finally:
        peer.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        router.close()
        ctx.destroy(linger=0)


async def test_events_for_a_process_whose_socket_closed_wait_for_the_next_one(
    routed: Routed,
) -> None:
    """A crashed process is still `idle` in the table until its exit is seen, but its socket
    is gone (here: no peer has its routing id). What is flushed to it then is not answered
    `E_AGENT_UNDELIVERABLE` (the supervision test saw that under load): it waits, in order,
    for the replacement, and nothing is blamed for the death."""
    router, entry = routed.router, routed.entry
    events, waiters = [], []
    for i in range(3):
        event = new_event(type="ask", input=str(i), instance_key="k", source=SOURCE,
                          reply_to=ReplyTo(target="control", correlation_id=f"c{i}"))  # fmt: skip
        waiter: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
        router.submit(event, entry.address, waiter)
        events.append(event.id)
        waiters.append(waiter)
    box = router.mailbox(entry.address)
    assert [e.id for e in box.queue] == events and not box.inflight
    assert not any(w.done() for w in waiters)
    with capture_logs() as logs:
        router.on_process_dead(entry, "signal 9")
    assert [e.id for e in box.queue] == events
    assert not any(w.done() for w in waiters)
    assert not [line for line in logs if line["event"] in ("event_retried", "event_dropped")]


async def test_a_call_goes_to_the_handler_of_its_op_and_one_without_is_answered(
    tmp_path: Path,
) -> None:
    """The router's call handlers are one mapping of ops: each op reaches its handler; an op
    nobody handles (a newer child's) is answered E_NOT_IMPLEMENTED at once, never silence."""
    table = ProcessTable()
    entry = table.entry(agent_address("a", "k"))
    entry.generation, entry.status = 1, ProcessStatus.IDLE
    ctx = zmq.asyncio.Context()
    handled: asyncio.Queue[CallPayload] = asyncio.Queue()

    def list_call(caller: ProcessEntry, payload: CallPayload) -> None:
        handled.put_nowait(payload)

    endpoint = f"ipc://{tmp_path}/agents.sock"
    router = build_router(ctx, endpoint, table, FakeLifecycle(), calls={CallOp.LIST: list_call})
    task = asyncio.ensure_future(router.run())
    peer = ctx.socket(zmq.DEALER)
    try:
        peer.setsockopt(zmq.IDENTITY, entry.routing_id)
        peer.setsockopt(zmq.LINGER, 0)
        peer.connect(endpoint)
        for call_id, op in (("1", CallOp.LIST), ("2", CallOp.CATALOG)):
            payload = CallPayload(call_id=call_id, op=op)
            await peer.send(encode(Call(from_=entry.id_text, to=ORCHESTRATOR, payload=payload)))
        async with asyncio.timeout(5):
            assert (await handled.get()).call_id == "1"
            answer = decode_message(await peer.recv())
        assert isinstance(answer, CallResult)
        assert answer.payload.call_id == "2" and not answer.payload.ok
        assert answer.payload.error is not None
        assert answer.payload.error.code == ErrorCode.E_NOT_IMPLEMENTED
        assert handled.empty()
    finally:
        peer.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        router.close()
        ctx.destroy(linger=0)
