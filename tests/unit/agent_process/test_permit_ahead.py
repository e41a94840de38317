"""The permit asked ahead for a turn's first model call (agent_process/permit_ahead.py): the
call takes it without a second round trip, and a permit that is not used goes back to the
Model's bucket (a zero-usage report carrying the tokens it took)."""

from __future__ import annotations

import asyncio

from agent_process.permit_ahead import FRESH_S, Ahead
from protocol.events import new_event
from protocol.messages import Call, CallOp, CallResultPayload, Message
from tests.unit.agent_process.test_bridge import ME, Sent, bridge

ARGS = {"model": "m", "eventId": "e1", "estimatedTokens": 40}


async def next_call(sent: Sent) -> Call:
    msg: Message = await sent.get()
    assert isinstance(msg, Call)
    return msg


def granted(call: Call, tokens: int = 40) -> CallResultPayload:
    return CallResultPayload(call_id=call.payload.call_id, ok=True,
                             result={"waitedMs": 0.0, "tokens": tokens})  # fmt: skip


async def test_the_first_call_takes_the_permit_asked_ahead() -> None:
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        await b.ask_ahead(ARGS)
        asked = await next_call(sent)
        assert (asked.payload.op, asked.payload.args) == (CallOp.MODEL_PERMIT, ARGS)
        b.deliver_call_result(granted(asked))
        answer = await b.permit({**ARGS, "estimatedTokens": 55})
        assert answer.ok and answer.result["tokens"] == 40
        assert sent.empty()  # no second round trip
        await b.drop_ahead()  # used: nothing goes back
        assert sent.empty()


async def test_a_permit_asked_ahead_for_another_turn_goes_back() -> None:
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        await b.ask_ahead(ARGS)
        b.deliver_call_result(granted(await next_call(sent), tokens=40))
        waiting = asyncio.ensure_future(b.permit({**ARGS, "eventId": "e2"}))
        back = await next_call(sent)
        assert back.payload.op is CallOp.MODEL_USAGE
        assert (back.payload.args["estimatedTokens"], back.payload.args["inputTokens"]) == (40, 0)
        fresh = await next_call(sent)  # asked now for its own turn
        assert fresh.payload.op is CallOp.MODEL_PERMIT and fresh.payload.args["eventId"] == "e2"
        b.deliver_call_result(granted(fresh))
        assert (await waiting).ok


async def test_an_unused_permit_goes_back_at_the_turns_end_even_once_granted_later() -> None:
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        await b.ask_ahead(ARGS)
        asked = await next_call(sent)
        await b.drop_ahead()  # the turn ended before its model call; the grant is still due
        assert sent.empty()
        b.deliver_call_result(granted(asked, tokens=33))  # the rate limit let it through now
        back = await next_call(sent)
        assert back.payload.op is CallOp.MODEL_USAGE and back.payload.args["estimatedTokens"] == 33


async def test_an_old_grant_is_not_used_and_a_refusal_gives_nothing_back() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[CallResultPayload] = loop.create_future()
    ahead = Ahead.of(ARGS, "p0", future, now=100.0)
    assert ahead.usable(ARGS, now=100.0 + FRESH_S * 10)  # still waiting: its grant is due
    future.set_result(CallResultPayload(call_id="p0", ok=True, result={"tokens": 1}))
    assert ahead.usable(ARGS, now=100.0 + FRESH_S)
    assert not ahead.usable(ARGS, now=100.0 + FRESH_S + 0.1)
    assert not ahead.usable({**ARGS, "model": "other"}, now=100.0)
    refused: asyncio.Future[CallResultPayload] = loop.create_future()
    refused.set_result(CallResultPayload(call_id="p1", ok=False))
    assert Ahead.of(ARGS, "p1", refused, now=0.0).give_back() is None


async def test_the_last_calls_usage_waits_for_the_turns_end_or_the_next_frame() -> None:
    """The usage of a turn's last model call does not go out before the reply; it goes at
    `flush_usage` (the turn's end) or ahead of any frame sent before that."""
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        b.current = new_event(type="user.message", input="hi", instance_key="k", source=ME)
        await b.report({"model": "m", "inputTokens": 3}, last=True)
        assert sent.empty()
        await b.report({"model": "m", "inputTokens": 4})  # a call with tool calls after it
        first, second = await next_call(sent), await next_call(sent)
        assert [first.payload.args["inputTokens"], second.payload.args["inputTokens"]] == [3, 4]
        await b.report({"model": "m", "inputTokens": 5}, last=True)
        await b.ask_ahead(ARGS)  # any frame of the bridge: the held report goes first
        assert (await next_call(sent)).payload.op is CallOp.MODEL_USAGE
        assert (await next_call(sent)).payload.op is CallOp.MODEL_PERMIT
        await b.report({"model": "m", "inputTokens": 6}, last=True)
        await b.flush_usage()
        assert (await next_call(sent)).payload.args["inputTokens"] == 6
        b.current = None
        await b.report({"model": "m", "inputTokens": 7}, last=True)  # no turn: sent at once
        assert (await next_call(sent)).payload.args["inputTokens"] == 7


async def test_the_permit_asked_ahead_is_sent_before_the_turn_goes_on() -> None:
    """The ask is handed to the socket (which writes it at once: agent_process/dealer.py) before
    `ask_ahead` returns, so the daemon grants it while the turn's set-up runs."""
    async with asyncio.timeout(5):
        sent: Sent = asyncio.Queue()
        b = bridge(sent)
        await b.ask_ahead(ARGS)
        assert sent.qsize() == 1
        assert (await next_call(sent)).payload.op is CallOp.MODEL_PERMIT
