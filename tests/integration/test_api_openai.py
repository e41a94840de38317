"""The `api` connector's OpenAI-compatible edge through a real daemon, driven by the official
`openai` SDK (sync and streaming): models, completions with usage, the instance from `user`,
a client-side call answered with a `tool` message, and bad input (401, 404, 413, 415,
malformed JSON, 503 in backoff, a client gone mid-stream)."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import httpx
import openai
import pytest

from tests.integration.api_edge import TOKEN, start_edge
from tests.integration.api_edge import conversation as history
from tests.integration.conftest import StartDaemon


def _sync_client(url: str, token: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=30)


async def test_the_openai_sdk_lists_models_completes_and_streams(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = _sync_client(edge.url)
        models = await asyncio.to_thread(client.models.list)
        done = await asyncio.to_thread(
            client.chat.completions.create, model="front", user="ann",
            messages=[{"role": "user", "content": "hello"}],
        )  # fmt: skip
        aclient = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0)
        stream = await aclient.chat.completions.create(
            model="front", user="ann", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "x"},
                      {"role": "user", "content": "again"}],
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
        by_header = await aclient.chat.completions.create(
            model="back", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            extra_headers={"X-Goondan-Instance": "team"},
        )  # fmt: skip
        await aclient.close()
    assert sorted(m.id for m in models.data) == ["back", "capped", "front"]
    assert done.choices[0].message.content == "echo: hello"
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.prompt_tokens > 0
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: again"  # only the last user message is the input
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert history("ann") == ["hello", "echo: hello", "again", "echo: again"]  # user = instance
    assert by_header.choices[0].message.content == "back: hi"
    assert history("team", "back") == ["hi", "back: hi"]


async def test_a_client_side_call_is_a_tool_call_answered_by_a_tool_message(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0)
        ask = [{"role": "user", "content": "calendar this week"}]
        first = await client.chat.completions.create(model="front", user="cal", messages=ask)
        call = first.choices[0].message.tool_calls[0]
        answer = [
            *ask,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"events": ["standup"]}'},
        ]
        second = await client.chat.completions.create(model="front", user="cal", messages=answer)
        streamed = await client.chat.completions.create(
            model="front", user="cal2", stream=True, messages=ask)  # fmt: skip
        deltas = [c.choices[0] async for c in streamed if c.choices]
        await client.close()
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "calendar.read"
    assert json.loads(call.function.arguments) == {"range": "calendar this week"}
    assert second.choices[0].message.content.startswith("calendar says")
    assert "standup" in second.choices[0].message.content
    streamed_calls = [d.delta.tool_calls for d in deltas if d.delta.tool_calls]
    assert streamed_calls[0][0].function.name == "calendar.read"
    assert deltas[-1].finish_reason == "tool_calls"


async def test_bad_requests_get_openai_errors_with_the_right_status(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        wrong = _sync_client(edge.url, token="not-the-token")
        with pytest.raises(openai.AuthenticationError) as unauthorized:
            await asyncio.to_thread(wrong.models.list)
        rotated = _sync_client(edge.url, token="second-token-for-rotation")
        assert len((await asyncio.to_thread(rotated.models.list)).data) == 3
        client = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0)
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="nobody", messages=[
                {"role": "user", "content": "hi"}])  # fmt: skip
        url, auth = f"{edge.url}/v1/chat/completions", edge.auth
        async with httpx.AsyncClient(timeout=30) as raw:
            missing = await raw.get(f"{edge.url}/v1/models")
            malformed = await raw.post(url, content=b"{", headers=auth | _JSON)
            no_messages = await raw.post(url, json={"model": "front", "messages": []}, headers=auth)
            plain = await raw.post(
                url, content=b"{}", headers=auth | {"Content-Type": "text/plain"}
            )
            huge = await raw.post(url, content=b"x" * (2 << 20), headers=auth | _JSON)
            page = await raw.post(url, json={}, headers=auth | {"Origin": "http://evil.example"})
        await client.close()
    assert unauthorized.value.status_code == 401
    assert unknown.value.status_code == 404
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    statuses = [r.status_code for r in (malformed, no_messages, plain, huge, page)]
    assert statuses == [400, 400, 415, 413, 403]
    for answer in (missing, malformed, plain, huge, page):  # OpenAI's error shape
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


_JSON = {"Content-Type": "application/json"}


async def test_an_agent_in_backoff_is_503(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0)
        hi = [{"role": "user", "content": "hi"}]
        assert (await client.chat.completions.create(model="back", messages=hi)).choices
        back = await edge.daemon.process("back")
        os.kill(back.pid, signal.SIGKILL)
        await edge.daemon.wait_for("transition", target="crashLoopBackOff")
        with pytest.raises(openai.InternalServerError) as busy:
            await client.chat.completions.create(model="back", messages=hi)
        await client.close()
    assert busy.value.status_code == 503
    assert busy.value.body["code"] == "E_AGENT_BACKOFF"  # type: ignore[index]


async def test_an_agent_over_its_budget_is_429(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0)
        hi = [{"role": "user", "content": "hi"}]
        assert (await client.chat.completions.create(model="capped", messages=hi)).choices
        with pytest.raises(openai.RateLimitError) as over:
            await client.chat.completions.create(model="capped", messages=hi)
        await client.close()
    assert over.value.body["code"] == "E_AGENT_BUDGET_EXCEEDED"  # type: ignore[index]


async def test_a_client_gone_mid_stream_leaves_the_turn_to_finish(
    start_daemon: StartDaemon,
) -> None:
    """The client drops a streaming request while the agent works: the turn finishes and is
    recorded, and the next request of that conversation comes after it."""
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        client = openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=TOKEN, max_retries=0)
        mark = edge.daemon.mark()
        request = asyncio.ensure_future(client.chat.completions.create(
            model="front", user="gone", stream=True,
            messages=[{"role": "user", "content": "slow thinking"}]))  # fmt: skip
        await edge.daemon.wait_for("ingress_routed", since=mark)  # the turn has its event
        request.cancel()  # the client goes away: its connection is closed
        with pytest.raises(asyncio.CancelledError):
            await request
        after = await client.chat.completions.create(
            model="front", user="gone", messages=[{"role": "user", "content": "next"}]
        )
        await client.close()
    assert after.choices[0].message.content == "echo: next"
    assert history("gone") == ["slow thinking", "slow: slow thinking", "next", "echo: next"]
