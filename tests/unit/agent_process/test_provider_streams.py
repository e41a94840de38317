"""Streamed turns through the openai and anthropic providers against a local server that speaks
their real server-sent-event formats (real SDKs, real sockets): the deltas, in order, and a
reply, usage and conversation identical to the unstreamed turn's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_process.runtime import AgentRuntime, TurnResult
from protocol.events import ReplyTo, Source, SourceKind, new_event
from protocol.messages import TurnOutcome
from protocol.stream import DeltaKind, StreamDelta
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.fake_llm import (
    FakeLLMServer,
    Sse,
    anthropic_message,
    anthropic_stream,
    chat_completion,
    openai_stream,
)
from tests.unit.agent_process.helpers import TIMEOUT, make_runtime, turn
from tests.unit.agent_process.test_providers import CALC, model

ARGS = {"a": 2, "b": 3}
GAP = 0.03
"""Between two events of a stream: each text piece arrives on its own, as a model writes."""


async def streamed_turn(rt: AgentRuntime, text: str) -> tuple[TurnResult, list[StreamDelta]]:
    deltas: list[StreamDelta] = []

    def out(delta: StreamDelta) -> bool:
        deltas.append(delta)
        return True

    rt.stream_to(out)
    event = new_event(
        type="user.input", input=text, instance_key="k1",
        source=Source(kind=SourceKind.CLI, name="cli"),
        reply_to=ReplyTo(target="control", correlation_id="c-1", stream=True),
    )  # fmt: skip
    async with asyncio.timeout(TIMEOUT):
        return await rt.run_turn(event), deltas


def conversation(rt: AgentRuntime) -> list[tuple[Any, ...]]:
    return [
        (m.role, m.content, m.tool_call_id, [(c.id, c.name, c.args) for c in m.tool_calls])
        for m in rt.store.messages
    ]


async def both_ways(
    provider: str, plain: list[Any], streams: list[Sse]
) -> tuple[TurnResult, TurnResult, list[StreamDelta], FakeLLMServer]:
    """The same turn unstreamed (`plain` replies) and streamed (`streams`), each in its own
    instance; asserts the two conversations are the same."""
    async with FakeLLMServer() as server:
        suffix = "/v1" if provider == "openai" else ""
        endpoint = f"http://127.0.0.1:{server.port}{suffix}"
        runtimes = []
        for key in ("plain", "streamed"):
            resources = (model(provider, endpoint), b.agent(tools=["calc"]), CALC)
            runtimes.append(await make_runtime(*resources, instance=key))
        try:
            server.replies = [(200, body) for body in plain]
            unstreamed = await turn(runtimes[0], "add 2 and 3")
            server.replies = [(200, body) for body in streams]
            result, deltas = await streamed_turn(runtimes[1], "add 2 and 3")
            assert conversation(runtimes[0]) == conversation(runtimes[1])
        finally:
            for rt in runtimes:
                await rt.close()
    return unstreamed, result, deltas, server


def check_deltas(deltas: list[StreamDelta], tool: str, call_id: str, pieces: list[str]) -> None:
    """`deltas`: in order from 0, all of this turn; after the step-1 text: the tool call's
    start and end, then the step-2 text in `pieces`."""
    assert [d.seq for d in deltas] == list(range(len(deltas)))
    assert {d.correlation_id for d in deltas} == {"c-1"}
    started, finished, *texts = [d for d in deltas if d.step == 2 or d.kind is not DeltaKind.TEXT]
    assert (started.kind, started.tool, started.tool_call_id, started.step) == (
        DeltaKind.TOOL_STARTED, tool, call_id, 1
    )  # fmt: skip
    assert (finished.kind, finished.tool, finished.status) == (DeltaKind.TOOL_FINISHED, tool, "ok")
    assert [(d.kind, d.step, d.text) for d in texts] == [(DeltaKind.TEXT, 2, p) for p in pieces]


async def test_openai_streams_text_and_tool_progress_with_the_same_reply_and_usage() -> None:
    call = {"id": "call_1", "name": "calc__add", "args": ARGS}
    pieces = ["the ", "sum ", "is 5"]
    unstreamed, result, deltas, server = await both_ways(
        "openai",
        [chat_completion(tool_calls=[call]), chat_completion("the sum is 5")],
        [openai_stream([], tool_calls=[call]), openai_stream(pieces, gap=GAP)],
    )
    assert result.outcome is TurnOutcome.COMPLETED
    assert (result.text, result.usage) == (unstreamed.text, unstreamed.usage)
    assert result.usage == {"inputTokens": 22, "outputTokens": 14}
    check_deltas(deltas, "calc__add", "call_1", pieces)
    body = server.requests[-1].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "stream" not in server.requests[0].body  # the unstreamed turn asked as before


async def test_anthropic_streams_text_and_tool_progress_with_the_same_reply_and_usage() -> None:
    tool = {"type": "tool_use", "id": "tu_1", "name": "calc__add", "input": ARGS}
    pieces = ["fi", "ve"]
    unstreamed, result, deltas, server = await both_ways(
        "anthropic",
        [anthropic_message([{"type": "text", "text": "adding"}, tool], stop="tool_use"),
         anthropic_message([{"type": "text", "text": "five"}])],
        [anthropic_stream([{"type": "text", "pieces": ["add", "ing"]}, tool], stop="tool_use",
                          gap=GAP),
         anthropic_stream([{"type": "text", "pieces": pieces}], gap=GAP)],
    )  # fmt: skip
    assert result.outcome is TurnOutcome.COMPLETED and result.text == "five"
    assert (result.text, result.usage) == (unstreamed.text, unstreamed.usage)
    first_step = [d.text for d in deltas if d.kind is DeltaKind.TEXT and d.step == 1]
    assert first_step == ["add", "ing"]  # the text before the tool call is streamed too
    check_deltas(deltas, "calc__add", "tu_1", pieces)
    assert server.requests[-1].body["stream"] is True


@pytest.mark.parametrize(
    ("provider", "reply", "code"),
    [
        ("openai", (429, {"error": {"message": "slow down", "type": "x"}}), "E_MODEL_RATE_LIMIT"),
        ("openai", (200, Sse([(None, {"error": {"message": "overloaded"}})])), "E_MODEL_ERROR"),
        ("openai", (200, Sse([(None, "{not json")])), "E_MODEL_ERROR"),
        ("openai", (200, Sse([(None, {"choices": "nope"})])), "E_MODEL_ERROR"),
        ("openai", (200, Sse([(None, "[DONE]")])), "E_MODEL_ERROR"),
        ("openai", (200, Sse([(None, {"choices": []})], cut=True)), "E_MODEL_CONNECTION"),
        ("anthropic", (529, {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": "busy"}}), "E_MODEL_ERROR"),
        ("anthropic", (200, Sse([("error", {"type": "error", "error": {
            "type": "overloaded_error", "message": "busy"}})])), "E_MODEL_ERROR"),
        ("anthropic", (200, Sse([("message_start", "{not json")])), "E_MODEL_ERROR"),
    ],
    ids=["429", "error-event", "not-json", "wrong-shape", "no-chunks", "hung-up", "anthropic-529",
         "anthropic-error-event", "anthropic-not-json"],
)  # fmt: skip
async def test_a_failed_stream_fails_the_turn_with_a_code(
    provider: str, reply: tuple[int, Any], code: str
) -> None:
    async with FakeLLMServer() as server:
        server.replies = [reply]
        suffix = "/v1" if provider == "openai" else ""
        rt = await make_runtime(model(provider, f"http://127.0.0.1:{server.port}{suffix}"),
                                b.agent())  # fmt: skip
        try:
            result, deltas = await streamed_turn(rt, "hi")
        finally:
            await rt.close()
    assert result.outcome is TurnOutcome.FAILED
    assert result.error is not None and result.error.code == code, result.error
    assert result.error.suggestion
    assert not [d for d in deltas if d.kind is DeltaKind.TEXT]


async def test_text_that_arrives_in_one_burst_goes_out_as_one_delta_and_the_reply() -> None:
    """Chunks read from the socket in one go cost the daemon one frame, not one per token:
    the first piece at once (the time to first delta); the rest of the burst, the turn's last
    text, rides with the reply, which carries the whole answer."""
    async with FakeLLMServer() as server:
        server.replies = [(200, openai_stream(["a", "b", "c", "d"]))]
        rt = await make_runtime(model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent())
        try:
            result, deltas = await streamed_turn(rt, "hi")
        finally:
            await rt.close()
    assert result.text == "abcd"
    assert [(d.seq, d.kind, d.text) for d in deltas] == [(0, DeltaKind.TEXT, "a")]


async def test_cached_prompt_tokens_of_a_streamed_call_are_counted() -> None:
    async with FakeLLMServer() as server:
        server.replies = [(200, openai_stream(["ok"], usage=(20, 2), cached=16))]
        rt = await make_runtime(model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent())
        try:
            result, _ = await streamed_turn(rt, "hi")
        finally:
            await rt.close()
    assert result.usage == {"inputTokens": 20, "outputTokens": 2, "cachedInputTokens": 16}


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
async def test_streamed_calls_read_any_line_ending_and_share_one_connection(eol: str) -> None:
    """The body is read to its end after `[DONE]`, so the SDK's pool keeps the connection (a
    new one per call would add a TCP handshake to each turn)."""
    async with FakeLLMServer() as server:
        streams = [openai_stream([f"t{i}", "!"]) for i in range(3)]
        for stream in streams:
            stream.eol = eol
        server.replies = [(200, stream) for stream in streams]
        rt = await make_runtime(model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent())
        try:
            texts = [(await streamed_turn(rt, f"hi {i}"))[0].text for i in range(3)]
        finally:
            await rt.close()
        connections = len(server._tasks)
    assert texts == ["t0!", "t1!", "t2!"]
    assert connections == 1


async def test_a_server_that_does_not_end_its_stream_after_done_does_not_hold_the_turn() -> None:
    async with FakeLLMServer() as server:
        stream = openai_stream(["ok"])
        stream.endless = True
        server.replies = [(200, stream), (200, openai_stream(["again"]))]
        rt = await make_runtime(model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent())
        try:
            first, _ = await streamed_turn(rt, "hi")
            second, _ = await streamed_turn(rt, "and now")  # on a new connection
        finally:
            await rt.close()
        connections = len(server._tasks)
    assert (first.text, second.text) == ("ok", "again")
    assert connections == 2


async def test_a_burst_before_a_tool_call_is_all_sent_before_the_calls_deltas() -> None:
    """Only the turn's last step leaves its rest to the reply: a step that calls tools sends
    its text first (the reply holds only the last step's)."""
    call = {"id": "call_1", "name": "calc__add", "args": ARGS}
    async with FakeLLMServer() as server:
        server.replies = [(200, openai_stream(["let ", "me ", "add"], tool_calls=[call])),
                          (200, openai_stream(["5"]))]  # fmt: skip
        endpoint = f"http://127.0.0.1:{server.port}/v1"
        rt = await make_runtime(model("openai", endpoint), b.agent(tools=["calc"]), CALC)
        try:
            result, deltas = await streamed_turn(rt, "add 2 and 3")
        finally:
            await rt.close()
    assert result.text == "5"
    assert [(d.kind, d.step, d.text) for d in deltas] == [
        (DeltaKind.TEXT, 1, "let "), (DeltaKind.TEXT, 1, "me add"),
        (DeltaKind.TOOL_STARTED, 1, ""), (DeltaKind.TOOL_FINISHED, 1, ""), (DeltaKind.TEXT, 2, "5"),
    ]  # fmt: skip
