"""The provider HTTP client: the SDKs' retry rules, error names and proxy choice, on a real
local server."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from agent_process.models import http_json
from agent_process.models.http_json import JsonPoster, ProviderFailure
from tests.unit.agent_process.fake_llm import FakeLLMServer


class Reply(msgspec.Struct):
    ok: bool


DECODER = msgspec.json.Decoder(Reply)
NO = {"error": {"message": "provider says no", "type": "x"}}


def poster(server: FakeLLMServer, retries: int) -> JsonPoster:
    return JsonPoster(
        f"http://127.0.0.1:{server.port}/v1",
        headers={"Authorization": "Bearer sk-x"},
        timeout=5.0,
        max_retries=retries,
    )


async def test_a_5xx_is_retried_and_the_body_and_headers_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_json, "_backoff", lambda attempt: 0.0)
    async with asyncio.timeout(10), FakeLLMServer() as server:
        server.replies = [(503, NO), (200, {"ok": True, "extra": 1})]
        client = poster(server, retries=1)
        try:
            reply = await client.post("/chat/completions", {"model": "m", "n": [1]}, DECODER)
        finally:
            await client.aclose()
    assert reply == Reply(ok=True)
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2
    first = server.requests[0]
    assert first.method == "POST" and first.body == {"model": "m", "n": [1]}
    assert first.headers["authorization"] == "Bearer sk-x"
    assert first.headers["content-type"] == "application/json"


async def test_a_4xx_is_not_retried_and_keeps_the_sdk_name_and_message() -> None:
    async with asyncio.timeout(10), FakeLLMServer() as server:
        server.replies = [(400, NO), (200, {"ok": True})]
        client = poster(server, retries=2)
        try:
            with pytest.raises(ProviderFailure) as caught:
                await client.post("chat/completions", {}, DECODER)
        finally:
            await client.aclose()
    assert caught.value.sdk_name == "BadRequestError"
    assert caught.value.status_code == 400
    assert "provider says no" in str(caught.value)
    assert len(server.requests) == 1


async def test_retries_give_up_with_the_last_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_json, "_backoff", lambda attempt: 0.0)
    async with asyncio.timeout(10), FakeLLMServer() as server:
        server.replies = [(429, NO), (429, NO)]
        client = poster(server, retries=1)
        try:
            with pytest.raises(ProviderFailure) as caught:
                await client.post("chat/completions", {}, DECODER)
        finally:
            await client.aclose()
    assert caught.value.sdk_name == "RateLimitError"
    assert len(server.requests) == 2


async def test_a_reply_that_does_not_match_is_a_coded_failure() -> None:
    async with asyncio.timeout(10), FakeLLMServer() as server:
        server.replies = [(200, {"ok": "not a bool"})]
        client = poster(server, retries=0)
        try:
            with pytest.raises(ProviderFailure) as caught:
                await client.post("chat/completions", {}, DECODER)
        finally:
            await client.aclose()
    assert caught.value.sdk_name == "APIResponseValidationError"


def test_the_environment_proxy_is_used_unless_no_proxy_names_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert http_json._env_proxy("https://api.example.com/v1/") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.local:3128")
    assert http_json._env_proxy("https://api.example.com/v1/") == "http://proxy.local:3128"
    monkeypatch.setenv("NO_PROXY", "api.example.com")
    assert http_json._env_proxy("https://api.example.com/v1/") is None
