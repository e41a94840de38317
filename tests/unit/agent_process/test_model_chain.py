"""The model wrappers inside an agent: fallback decisions, prompt-cache breakpoints, cached
token counts from both providers (real SDKs against the fake model server)."""

from __future__ import annotations

from typing import Any

import pytest

from agent_process.models.anthropic_cache import add_breakpoints
from agent_process.models.base import ModelError
from agent_process.models.fallback import falls_back
from protocol.errors import ErrorCode
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.fake_llm import FakeLLMServer, anthropic_message, chat_completion
from tests.unit.agent_process.helpers import make_runtime, turn

E = ErrorCode


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        (E.E_MODEL_RATE_LIMIT, 429, True),
        (E.E_MODEL_TIMEOUT, None, True),
        (E.E_MODEL_CONNECTION, None, True),
        (E.E_MODEL_ERROR, 529, True),  # Anthropic's "overloaded"
        (E.E_MODEL_ERROR, 503, True),
        (E.E_MODEL_BAD_REQUEST, 400, False),
        (E.E_MODEL_AUTH, 401, False),
        (E.E_AGENT_BUDGET_EXCEEDED, None, False),
    ],
)
def test_what_falls_back(code: ErrorCode, status: int | None, expected: bool) -> None:
    assert falls_back(ModelError(code, "x", status=status)) is expected


def test_breakpoints_mark_tools_system_and_the_newest_block() -> None:
    kwargs: dict[str, Any] = {"system": "sys", "tools": [{"name": "a"}, {"name": "b"}]}
    two = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": two},
    ]
    add_breakpoints(kwargs, messages)
    assert kwargs["system"] == [
        {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}
    ]
    assert [("cache_control" in t) for t in kwargs["tools"]] == [False, True]
    marks = [("cache_control" in blk) for m in messages for blk in m["content"]]
    assert marks == [False, False, True]


def model(provider: str, port: int, **options: Any) -> Any:
    endpoint = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    spec = {"provider": provider, "model": "m", "endpoint": endpoint, "apiKey": {"value": "k"},
            "options": {"maxRetries": 0, "timeoutSeconds": 10, **options}}  # fmt: skip
    return b.resource("Model", "m", spec)


async def test_prompt_caching_off_sends_plain_requests() -> None:
    async with FakeLLMServer() as server:
        server.replies = [(200, anthropic_message([{"type": "text", "text": "ok"}]))]
        rt = await make_runtime(model("anthropic", server.port, promptCaching=False), b.agent())
        try:
            await turn(rt, "hi")
        finally:
            await rt.close()
    body = server.requests[0].body
    assert body["system"] == "You are a test agent." and "promptCaching" not in body
    assert all("cache_control" not in blk for m in body["messages"] for blk in m["content"])


async def test_openai_cached_prompt_tokens_are_counted() -> None:
    reply = chat_completion("ok")
    reply["usage"]["prompt_tokens_details"] = {"cached_tokens": 8}
    async with FakeLLMServer() as server:
        server.replies = [(200, reply)]
        rt = await make_runtime(model("openai", server.port), b.agent())
        try:
            result = await turn(rt, "hi")
        finally:
            await rt.close()
    assert result.usage == {"inputTokens": 11, "outputTokens": 7, "cachedInputTokens": 8}
