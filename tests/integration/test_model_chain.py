"""Fallback chains and prompt caching through a real daemon, against the fake model server.

`Model/flaky` (openai) falls back to `Model/backup` (anthropic, another provider and options);
`Model/claude` (anthropic) caches its prompt by default. The bundle is tests/fixtures/costs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.integration.conftest import StartDaemon
from tests.integration.test_costs import runtime_events, start, usage_of
from tests.unit.agent_process.fake_llm import HANG, FakeLLMServer, anthropic_message

EPHEMERAL = {"type": "ephemeral"}
RATE_LIMITED = {"error": {"message": "slow down", "type": "rate_limit_error"}}


async def fall_back(
    start_daemon: StartDaemon, tmp_path: Path, first: tuple[int, Any]
) -> list[dict[str, Any]]:
    """One turn of `fb` whose first model call fails with `first`; the fallback events."""
    async with FakeLLMServer() as server:
        server.replies = [first, (200, anthropic_message([{"type": "text", "text": "backup"}]))]
        daemon = await start(start_daemon, tmp_path, server)
        reply = await daemon.send("hello", "fb")
        assert reply.ok, reply.error
        assert reply.result["input"] == "backup"
        primary, second = server.requests
    assert (primary.path, primary.body["model"]) == ("/v1/chat/completions", "gpt-flaky")
    assert (second.path, second.body["model"]) == ("/v1/messages", "claude-backup")
    events = runtime_events("fb")
    [usage] = [e["data"] for e in events if e["type"] == "model.usage"]
    assert usage["model"] == "backup"  # the step was answered by the fallback
    return [e["data"] for e in events if e["type"] == "model.fallback"]


async def test_a_429_falls_back_to_the_next_model(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        [event] = await fall_back(start_daemon, tmp_path, (429, RATE_LIMITED))
    assert (event["from"], event["to"]) == ("flaky", "backup")
    assert (event["code"], event["status"]) == ("E_MODEL_RATE_LIMIT", 429)


async def test_a_timeout_falls_back_to_the_next_model(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        [event] = await fall_back(start_daemon, tmp_path, (HANG, {}))
    assert (event["from"], event["to"], event["code"]) == ("flaky", "backup", "E_MODEL_TIMEOUT")


async def test_a_bad_request_does_not_fall_back(start_daemon: StartDaemon, tmp_path: Path) -> None:
    async with asyncio.timeout(60), FakeLLMServer() as server:
        server.replies = [(400, {"error": {"message": "bad", "type": "invalid_request_error"}})]
        daemon = await start(start_daemon, tmp_path, server)
        reply = await daemon.send("hello", "fb")
        assert reply.error is not None and reply.error.code == "E_MODEL_BAD_REQUEST"
        assert len(server.requests) == 1


def with_usage(message: dict[str, Any], **usage: int) -> dict[str, Any]:
    return {**message, "usage": {"input_tokens": 13, "output_tokens": 5, **usage}}


async def test_anthropic_requests_carry_cache_breakpoints_and_cached_tokens_are_priced(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    note = {"type": "tool_use", "id": "tu_1", "name": "ledger__note", "input": {"text": "x"}}
    async with asyncio.timeout(60), FakeLLMServer() as server:
        asked = anthropic_message([note], stop="tool_use")
        done = anthropic_message([{"type": "text", "text": "noted"}])
        server.replies = [
            (200, with_usage(asked, cache_creation_input_tokens=100)),
            (200, with_usage(done, cache_read_input_tokens=100)),
        ]
        daemon = await start(start_daemon, tmp_path, server)
        reply = await daemon.send("note x", "cached")
        assert reply.ok and reply.result["input"] == "noted"
        # the agent reports a turn's last model call right after its reply: poll for it
        while True:
            usage = usage_of(await daemon.status(), "cached")
            if usage.input_tokens >= 226:
                break
            await asyncio.sleep(0.05)
    for request in server.requests:
        body = request.body
        assert body["system"] == [
            {"type": "text", "text": "You keep a ledger.", "cache_control": EPHEMERAL}
        ]
        assert body["tools"][-1]["cache_control"] == EPHEMERAL
        assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
        marked = [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
        assert len(marked) == 1  # one breakpoint in the conversation: its newest block
    second = server.requests[1].body["messages"][-1]["content"][-1]
    assert second["type"] == "tool_result"
    events = runtime_events("cached")
    priced = [e["data"] for e in events if e["type"] == "model.usage"]
    assert [p["cachedInputTokens"] for p in priced if "cachedInputTokens" in p] == [100]
    read = priced[1]
    assert (read["inputTokens"], read["outputTokens"]) == (113, 5)
    assert read["costUsd"] == round((13 * 3 + 100 * 0.3 + 5 * 15) / 1e6, 8)
    steps = [e["usage"] for e in events if e["type"] == "step.completed"]
    assert steps[1]["cachedInputTokens"] == 100
    assert (usage.input_tokens, usage.cached_input_tokens) == (113 + 113, 100)
