"""The `api` connector streams the model's deltas through a real daemon, to the official
clients of each protocol: the `openai` SDK's streamed chat completion, the `a2a-sdk` client's
`message/stream`, and the `mcp` SDK client's progress notifications. The scripted model writes
its reply in 4-character pieces (`streamChunkChars`), so each client sees several deltas before
the end, and their text adds up to the reply recorded on disk. A client gone mid-stream leaves
the turn to finish and be recorded."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
import httpx2
import openai
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import TaskState
from google.protobuf.json_format import MessageToDict
from mcp.client.session import ClientSession

from protocol.endpoints import StateLayout
from tests.integration.api_edge import TOKEN, owned, start_edge
from tests.integration.api_edge import conversation as history
from tests.integration.conftest import StartDaemon
from tests.integration.test_api_a2a_mcp import AUTH, _mcp, _message, _task

STORY = "once upon a time there was tell a fox, and it streamed"


def _history(key: str) -> list[str]:
    """The instance's conversation on disk; none before its first turn ends."""
    try:
        return history(key)
    except FileNotFoundError:
        return []


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)


async def test_the_openai_sdk_gets_the_models_text_as_it_is_written(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = _client(edge.url)
        stream = await client.chat.completions.create(
            model="front", user="story", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "drip slowly"}])  # fmt: skip
        texts: list[str] = []
        finishes: list[str | None] = []
        on_disk_at_first: list[str] | None = None
        async for chunk in stream:
            for choice in chunk.choices:
                finishes.append(choice.finish_reason)
                if choice.delta.content:
                    if not texts:  # the reply is folded to disk when the turn ends
                        on_disk_at_first = _history("story")
                    texts.append(choice.delta.content)
        told = await client.chat.completions.create(
            model="front", user="story", stream=True,
            messages=[{"role": "user", "content": "tell a fox"}])  # fmt: skip
        told_texts = [c.choices[0].delta.content async for c in told if c.choices]
        timed = await client.chat.completions.create(
            model="front", user="clock", stream=True,
            messages=[{"role": "user", "content": "what time is it"}])  # fmt: skip
        timed_chunks = [c async for c in timed]
        timed_text = "".join(c.choices[0].delta.content or "" for c in timed_chunks if c.choices)
        tools = [(c.model_extra or {}).get("goondan", {}).get("tool") for c in timed_chunks]
        unstreamed = await client.chat.completions.create(
            model="front", user="clock2", messages=[{"role": "user", "content": "what time"}]
        )
        await client.close()
    reply = "one drop, then another drop, then the last drop"
    assert len(texts) >= 5 and "".join(texts) == reply
    assert on_disk_at_first == []  # the first delta came while the turn was still running
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    assert history("story") == ["drip slowly", reply, "tell a fox", STORY]
    assert len([t for t in told_texts if t]) >= 5 and "".join(t or "" for t in told_texts) == STORY
    # a step's text before a tool call streams as its own paragraph; the reply is the last step
    assert timed_text == "let me look\n\nit is noon now"
    # the agent's own tool shows as the chunks' extension, started then finished
    assert [(t["name"], t["status"]) for t in tools if t] == [
        ("clock__now", "started"), ("clock__now", "ok"),
    ]  # fmt: skip
    assert unstreamed.choices[0].message.content == "it is noon now"


async def _calendar_call(client: openai.AsyncOpenAI, key: str, ask: list[Any],
                         stream: bool) -> tuple[str, str, str]:  # fmt: skip
    """The client-side call a completion ends with, streamed or not: (id, name, arguments)."""
    if stream:
        asked = await client.chat.completions.create(
            model="front", user=key, stream=True, messages=ask)  # fmt: skip
        calls = [c.choices[0].delta.tool_calls async for c in asked if c.choices]
        found = next(found[0] for found in calls if found)
        assert found.function is not None and found.id is not None
        return found.id, str(found.function.name), str(found.function.arguments)
    whole = await client.chat.completions.create(model="front", user=key, messages=ask)
    tool_calls = whole.choices[0].message.tool_calls
    assert tool_calls is not None and tool_calls[0].type == "function"
    call = tool_calls[0]
    return call.id, call.function.name, call.function.arguments


@pytest.mark.parametrize("first_streamed", [True, False])
async def test_a_turn_resumed_by_a_tool_message_streams_its_reply(
    start_daemon: StartDaemon, first_streamed: bool
) -> None:
    """The tool message asks for a stream: the rest of the turn streams to it, whether the
    completion that ended with the tool call streamed or not."""
    key = f"cal{int(first_streamed)}"
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = _client(edge.url)
        ask: list[Any] = [{"role": "user", "content": "calendar next week"}]
        call_id, name, arguments = await _calendar_call(client, key, ask, first_streamed)
        answer = [
            *ask,
            {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": '{"events": ["retro"]}'},
        ]  # fmt: skip
        resumed = await client.chat.completions.create(
            model="front", user=key, stream=True, messages=answer)  # fmt: skip
        texts: list[str] = []
        on_disk_at_first: list[str] = []
        async for chunk in resumed:
            for choice in chunk.choices:
                if choice.delta.content:
                    if not texts:
                        on_disk_at_first = _history(key)
                    texts.append(choice.delta.content)
        await client.close()
    reply = "".join(texts)
    assert len(texts) >= 5 and reply.startswith("calendar says") and "retro" in reply
    assert reply not in on_disk_at_first  # the first delta came while the resumed turn ran
    assert _history(key)[-1] == reply


async def test_a_client_gone_mid_stream_leaves_the_streamed_turn_to_finish(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = _client(edge.url)
        mark = edge.daemon.mark()
        stream = await client.chat.completions.create(
            model="front", user="left", stream=True,
            messages=[{"role": "user", "content": "drip and go"}])  # fmt: skip
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break  # the first delta is here: the client hangs up
        await stream.close()
        await edge.daemon.wait_for("transition", process=f"agent:front:{owned('left')}:1",
                                   source="processing", target="idle", since=mark)  # fmt: skip
        after = await client.chat.completions.create(
            model="front", user="left", messages=[{"role": "user", "content": "next"}]
        )
        await client.close()
    # the edge stopped waiting when the client left: the first reply, which reached the
    # connector before the second, found nobody waiting for it
    log = StateLayout.from_env().process_log("edge", "api", "api").read_text()
    assert [json.loads(line)["event"] for line in log.splitlines()].count("response_unclaimed") == 1
    reply = "one drop, then another drop, then the last drop"
    assert history("left") == ["drip and go", reply, "next", "echo: next"]
    assert after.choices[0].message.content == "echo: next"


async def _stream_a2a(client: Any, text: str) -> tuple[list[Any], TaskState]:
    """Every response of a `message/stream`, and the last state."""
    task, responses = await _task(client, _message(text))
    return responses, task.status.state


async def test_an_a2a_stream_carries_artifact_chunks_and_tool_progress(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
            card = await A2ACardResolver(http, f"{edge.url}/a2a/front").get_agent_card()
            client = await create_client(card, ClientConfig(httpx_client=http, streaming=True))
            told, told_state = await _stream_a2a(client, "tell a fox")
            timed, timed_state = await _stream_a2a(client, "what time is it")
    chunks = [r.artifact_update for r in told if r.HasField("artifact_update")]
    *deltas, last = chunks
    assert len(deltas) >= 5 and all(c.append for c in deltas[1:]) and not deltas[0].append
    assert "".join(p.text for c in deltas for p in c.artifact.parts) == STORY
    assert (last.append, last.last_chunk, last.artifact.parts[0].text) == (False, True, STORY)
    assert told_state == timed_state == TaskState.TASK_STATE_COMPLETED
    said = [r.status_update.status.message for r in timed if r.HasField("status_update")]
    tools = [MessageToDict(m.metadata) for m in said if m.metadata]
    assert [(t["tool"], t["status"]) for t in tools if "tool" in t] == [
        ("clock__now", "started"), ("clock__now", "ok")]  # fmt: skip
    timed_last = [r.artifact_update for r in timed if r.HasField("artifact_update")][-1]
    assert timed_last.artifact.parts[0].text == "it is noon now"  # the reply replaces the steps


async def test_mcp_progress_notifications_carry_the_deltas(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        told: list[tuple[float, str | None]] = []
        timed: list[tuple[float, str | None]] = []

        def recorder(into: list[tuple[float, str | None]]) -> Any:
            async def record(value: float, total: float | None, message: str | None) -> None:
                into.append((value, message))

            return record

        http, transport = await _mcp(edge)
        async with http, transport as (read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            story = await session.call_tool("ask_front", {"input": "tell a fox"},
                                            progress_callback=recorder(told))  # fmt: skip
            time = await session.call_tool("ask_front", {"input": "what time is it"},
                                           progress_callback=recorder(timed))  # fmt: skip
    values = [v for v, _ in told]
    assert values == sorted(set(values))  # progress only grows
    texts = [m or "" for _, m in told[1:]]  # the first says the input was handed over
    assert len(texts) >= 5 and "".join(texts) == STORY == story.content[0].text
    messages = [m for _, m in timed[1:]]
    assert "clock__now started" in messages and "clock__now finished: ok" in messages
    text = "".join(m or "" for m in messages if m and not m.startswith("clock__now"))
    assert text == "let me look\n\nit is noon now"
    assert time.content[0].text == "it is noon now"


async def test_a_slow_reader_gets_the_backlog_merged_and_the_turn_ends_without_it(
    start_daemon: StartDaemon,
) -> None:
    """A client that stops reading mid-stream (a 64 KiB receive buffer, then no reads) stalls
    only its own answer: the turn writes its 2 MiB reply (~2,000 deltas) to the end and records
    it while the client reads nothing; the deltas that piled up meanwhile reach the client as a
    few large chunks (the edge's backlog holds a few entries, not one per delta), and their
    text is the whole reply."""
    async with asyncio.timeout(120):
        edge = await start_edge(start_daemon)
        small = httpx2.AsyncHTTPTransport(
            socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)]
        )
        http = openai.DefaultAsyncHttpxClient(transport=small)
        client = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0,
                                    http_client=http)  # fmt: skip
        text = "flood " + "0123456789abcdef" * 4096  # 64 KiB in, 32 copies out
        mark = edge.daemon.mark()
        stream = await client.chat.completions.create(
            model="front", user="flood", stream=True,
            messages=[{"role": "user", "content": text}])  # fmt: skip
        texts: list[str] = []
        chunks = aiter(stream)
        while not texts:
            chunk = await anext(chunks)
            texts.extend(c.delta.content for c in chunk.choices if c.delta.content)
        # the client reads nothing more until the turn has ended and its reply is on disk
        await edge.daemon.wait_for("transition", process=f"agent:front:{owned('flood')}:1",
                                   source="processing", target="idle", since=mark)  # fmt: skip
        on_disk = _history("flood")
        async for chunk in chunks:
            texts.extend(c.delta.content for c in chunk.choices if c.delta.content)
        await client.close()
    reply = text * 32
    assert on_disk == [text, reply]
    assert "".join(texts) == reply
    deltas = -(-len(reply) // 1024)
    assert len(texts) < deltas // 4, (len(texts), deltas)  # merged while the client stalled
