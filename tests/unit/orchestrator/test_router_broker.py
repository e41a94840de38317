"""The router as the broker of its services (`orchestrator.broker`): wiring and the request
operations that answer a request in steps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import zmq.asyncio

from orchestrator.delivery import OpenRequest
from orchestrator.router import Router, Services
from orchestrator.table import ProcessTable
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event, response_to
from tests.unit.orchestrator.conftest import Routed
from tests.unit.orchestrator.fakes import FakeLifecycle

SOURCE = Source(kind=SourceKind.CLI, name="goondan")


def request(requester: str) -> AgentEvent:
    reply_to = ReplyTo(target=requester, correlation_id="corr")
    return new_event(type="ask", input="?", instance_key="k", source=SOURCE, reply_to=reply_to)


def test_services_are_attached_once_and_needed_before_use(tmp_path: Path) -> None:
    ctx = zmq.asyncio.Context()
    router = Router(ctx, f"ipc://{tmp_path}/a.sock", ProcessTable())
    try:
        with pytest.raises(RuntimeError, match="attach"):
            _ = router.services
        services = Services(lifecycle=FakeLifecycle())
        router.attach(services)
        assert router.services is services
        with pytest.raises(RuntimeError, match="once"):
            router.attach(Services(lifecycle=FakeLifecycle()))
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
