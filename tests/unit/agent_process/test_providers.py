"""The openai and anthropic providers against a local HTTP server (real SDKs, real sockets)."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.fake_llm import (
    HANG,
    FakeLLMServer,
    anthropic_message,
    chat_completion,
)
from tests.unit.agent_process.helpers import make_runtime, turn

ADD = {
    "name": "add",
    "description": "Add two integers",
    "parameters": b.params(["a", "b"], a={"type": "integer"}, b={"type": "integer"}),
}
CALC = b.tool("calc", "tools/basic.py", [ADD])


def model(provider: str, endpoint: str, **options: Any) -> Any:
    return b.resource(
        "Model",
        "m",
        {
            "provider": provider,
            "model": f"{provider}-test",
            "endpoint": endpoint,
            "apiKey": {"value": "sk-test"},
            "options": {"maxRetries": 0, "timeoutSeconds": 10, **options},
        },
    )


async def test_openai_provider_sends_system_prompt_tool_schemas_and_tool_results() -> None:
    async with FakeLLMServer() as server:
        server.replies = [
            (
                200,
                chat_completion(
                    tool_calls=[{"id": "call_1", "name": "calc__add", "args": {"a": 2, "b": 3}}]
                ),
            ),
            (200, chat_completion("the sum is 5")),
        ]
        rt = await make_runtime(
            model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent(tools=["calc"]), CALC
        )
        try:
            result = await turn(rt, "add 2 and 3")
        finally:
            await rt.close()
    assert result.outcome is TurnOutcome.COMPLETED and result.text == "the sum is 5"
    assert result.usage == {"inputTokens": 22, "outputTokens": 14}
    first, second = server.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body["model"] == "openai-test"
    assert first.body["messages"] == [
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": "add 2 and 3"},
    ]
    assert first.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "calc__add",
                "description": "Add two integers",
                "parameters": ADD["parameters"],
            },
        }
    ]
    messages = second.body["messages"]
    assert messages[0] == {"role": "system", "content": "You are a test agent."}
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calc__add", "arguments": '{"a": 2, "b": 3}'},
            }
        ],
    }
    assert messages[3]["role"] == "tool" and messages[3]["tool_call_id"] == "call_1"
    assert json.loads(messages[3]["content"]) == {"status": "ok", "output": {"sum": 5}}


async def test_arguments_that_are_not_json_are_fed_back_as_invalid_args() -> None:
    async with FakeLLMServer() as server:
        bad = {"id": "call_9", "name": "calc__add", "args": {}, "raw": "{a: 2"}
        server.replies = [(200, chat_completion(tool_calls=[bad])), (200, chat_completion("ok"))]
        endpoint = f"http://127.0.0.1:{server.port}/v1"
        rt = await make_runtime(model("openai", endpoint), b.agent(tools=["calc"]), CALC)
        try:
            await turn(rt, "add")
        finally:
            await rt.close()
    messages = server.requests[1].body["messages"]
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == "{a: 2"  # sent back as is
    error = json.loads(messages[3]["content"])["error"]
    assert error["code"] == "E_TOOL_INVALID_ARGS" and "{a: 2" in error["message"]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, "E_MODEL_AUTH"),
        (429, "E_MODEL_RATE_LIMIT"),
        (400, "E_MODEL_BAD_REQUEST"),
        (503, "E_MODEL_ERROR"),
    ],
)
async def test_openai_provider_errors_fail_the_turn_with_a_code(status: int, code: str) -> None:
    async with FakeLLMServer() as server:
        server.replies = [(status, {"error": {"message": "provider says no", "type": "x"}})]
        rt = await make_runtime(model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent())
        try:
            result = await turn(rt, "hi")
        finally:
            await rt.close()
    assert result.outcome is TurnOutcome.FAILED
    assert result.error is not None and result.error.code == code
    assert "openai model 'openai-test'" in result.error.message
    assert result.error.suggestion


@pytest.mark.parametrize(
    "body",
    [{"choices": []}, {"choices": "nope"}, {"id": "x"}, ["not", "an", "object"]],
    ids=["no-choices", "wrong-type", "missing", "array"],
)
async def test_an_unusable_completion_is_a_coded_model_error(body: Any) -> None:
    async with FakeLLMServer() as server:
        server.replies = [(200, body)]
        rt = await make_runtime(model("openai", f"http://127.0.0.1:{server.port}/v1"), b.agent())
        try:
            result = await turn(rt, "hi")
        finally:
            await rt.close()
    assert result.outcome is TurnOutcome.FAILED
    assert result.error is not None and result.error.code == "E_MODEL_ERROR"
    assert "unusable" in result.error.message


async def test_a_provider_that_never_answers_is_a_timeout() -> None:
    async with FakeLLMServer() as server:
        server.replies = [(HANG, None)]
        endpoint = f"http://127.0.0.1:{server.port}/v1"
        rt = await make_runtime(model("openai", endpoint, timeoutSeconds=0.2), b.agent())
        try:
            result = await turn(rt, "hi")
        finally:
            await rt.close()
    assert result.error is not None and result.error.code == "E_MODEL_TIMEOUT"


async def test_unreachable_endpoint_is_a_connection_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rt = await make_runtime(model("openai", f"http://127.0.0.1:{port}/v1"), b.agent())
    try:
        result = await turn(rt, "hi")
    finally:
        await rt.close()
    assert result.error is not None and result.error.code == "E_MODEL_CONNECTION"


async def test_anthropic_provider_sends_system_tools_and_tool_result_blocks() -> None:
    async with FakeLLMServer() as server:
        server.replies = [
            (
                200,
                anthropic_message(
                    [
                        {"type": "text", "text": "adding"},
                        {
                            "type": "tool_use",
                            "id": "tu_1",
                            "name": "calc__add",
                            "input": {"a": 2, "b": 3},
                        },
                    ],
                    stop="tool_use",
                ),
            ),
            (200, anthropic_message([{"type": "text", "text": "5"}])),
        ]
        rt = await make_runtime(
            model("anthropic", f"http://127.0.0.1:{server.port}", promptCaching=False),
            b.agent(tools=["calc"]),
            CALC,
        )
        try:
            result = await turn(rt, "add")
        finally:
            await rt.close()
    assert result.outcome is TurnOutcome.COMPLETED and result.text == "5"
    assert result.usage == {"inputTokens": 26, "outputTokens": 10}
    first, second = server.requests
    assert first.path == "/v1/messages"
    assert "sk-test" in (
        first.headers.get("x-api-key", "") + first.headers.get("authorization", "")
    )
    assert first.body["system"] == "You are a test agent."
    assert first.body["tools"] == [
        {"name": "calc__add", "description": "Add two integers", "input_schema": ADD["parameters"]}
    ]
    assert second.body["system"] == "You are a test agent."
    assistant, tool_turn = second.body["messages"][1:]
    assert assistant["content"][1] == {
        "type": "tool_use",
        "id": "tu_1",
        "name": "calc__add",
        "input": {"a": 2, "b": 3},
    }
    block = tool_turn["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "tu_1"
    assert json.loads(block["content"]) == {"status": "ok", "output": {"sum": 5}}
