"""The agents bridge on its own: what a request carries (trace, auth, call chain), how it ends
(reply, coded error, timeout), and where an async reply goes (the durable inbox)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_process.bridge import CURRENT_SPAN, Bridge
from agent_process.inbox import Inbox
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import ReplyTo, Source, SourceKind, TraceContext, new_event, response_to
from protocol.messages import Event, Message

ME = Source(kind=SourceKind.AGENT, name="a", instance_key="k")
WORKER = Source(kind=SourceKind.AGENT, name="b", instance_key="k")


Sent = asyncio.Queue[Message]


def bridge(sent: Sent | None = None) -> Bridge:
    async def send(msg: Message) -> None:
        if sent is not None:
            sent.put_nowait(msg)

    b = Bridge(send)
    b.bind("agent:a:k:1", "agent:a:k", ME)
    return b


async def next_event(sent: Sent) -> Event:
    msg = await sent.get()
    assert isinstance(msg, Event)
    return msg


async def test_a_request_carries_trace_auth_and_chain_and_returns_the_reply() -> None:
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        b.current = new_event(
            type="agent.request", input="x", instance_key="k", source=WORKER,
            reply_to=ReplyTo(target="agent:z:k", correlation_id="up"),
            metadata={"callChain": ["z@k"]}, auth={"user": "u1"},
        )  # fmt: skip
        span = TraceContext.root()
        token = CURRENT_SPAN.set(span)
        task = asyncio.ensure_future(b.request("b", "hi", metadata={"m": 1}))
        CURRENT_SPAN.reset(token)
        frame = await next_event(sent)
        event = frame.payload
        assert frame.to == "agent:b:k"
        assert event.trace == span and event.auth == {"user": "u1"}
        assert event.metadata == {"m": 1, "callChain": ["z@k", "a@k"]}
        assert b.deliver_response(response_to(event, source=WORKER, text="done"))
        result = await task
        assert result == {
            "target": "b", "instanceKey": "k", "eventId": event.id,
            "correlationId": event.reply_to.correlation_id if event.reply_to else None,
            "accepted": True, "async": False, "response": "done",
        }  # fmt: skip


async def test_coded_errors_and_timeout() -> None:
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        task = asyncio.ensure_future(b.request("b", "hi"))
        event = (await next_event(sent)).payload
        error = ErrorInfo(code=ErrorCode.E_AGENT_CRASHED, message="gone")
        b.deliver_response(response_to(event, source=WORKER, text="", error=error))
        with pytest.raises(ToolFailed) as crashed:
            await task
        assert crashed.value.code == ErrorCode.E_AGENT_CRASHED
        with pytest.raises(ToolFailed) as late:
            await b.request("b", "hi", timeout_ms=10)
        assert late.value.code == ErrorCode.E_AGENT_TIMEOUT


async def test_an_async_reply_goes_to_the_inbox_and_wakes(tmp_path: Path) -> None:
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        b.inbox = Inbox(tmp_path / "inbox")
        woken = asyncio.Event()
        b.on_reply = woken.set
        result = await b.request("b", "hi", async_=True)
        assert result["async"] is True and result["response"] is None
        event = (await next_event(sent)).payload
        assert "callChain" not in event.metadata  # nobody blocks on an async request
        assert b.inbox.expected(result["correlationId"])
        b.deliver_response(response_to(event, source=WORKER, text="later"))
        await woken.wait()
        (reply,) = b.inbox.replies()
        assert reply.metadata()["interAgentResponse"] is True
        assert reply.text().endswith("later") and "b@k" in reply.text()
        assert not b.inbox.expected(result["correlationId"])


def test_a_reply_for_an_earlier_process_is_kept(tmp_path: Path) -> None:
    b = bridge()
    b.inbox = Inbox(tmp_path / "inbox")
    b.inbox.expect("c1", "agent:b:k")
    request = new_event(
        type="agent.request", input="x", instance_key="k", source=ME,
        reply_to=ReplyTo(target="agent:a:k", correlation_id="c1"),
    )  # fmt: skip
    assert b.deliver_response(response_to(request, source=WORKER, text="kept"))
    assert [r.data["response"] for r in b.inbox.replies()] == ["kept"]
    assert not b.deliver_response(
        response_to(
            new_event(type="t", input="", instance_key="k", source=ME,
                      reply_to=ReplyTo(target="x", correlation_id="unknown")),
            source=WORKER, text="",
        )
    )  # fmt: skip
