"""`provider: openai`: Chat Completions over HTTP (standard tool-call format).

`Model.spec.endpoint` is the base URL (default `OPENAI_BASE_URL`, else api.openai.com), so any
OpenAI-compatible server works. `Model.spec.options`: `maxRetries` (default 2), `timeoutSeconds`
(default 120); anything else goes into the request body (the agent's `modelConfig.params`
override it).

The request is the body `chat.completions.create` would send, posted by `http_json.JsonPoster`
(msgspec encode/decode, one kept-alive client, the SDK's retry rules and error names): the
SDK's own request building and pydantic parsing cost more than a call to a local server
(see tests/bench/bench_broker.py, warm hop).
"""

from __future__ import annotations

import json
import os
from typing import Any

import msgspec

from agent_process.messages import Message, Role, ToolCall
from agent_process.models.base import ModelError, ModelRequest, ModelResponse, Usage
from agent_process.models.errors import map_provider_error
from agent_process.models.http_json import JsonPoster, ProviderFailure
from protocol.errors import ErrorCode

CLIENT_OPTIONS = ("maxRetries", "timeoutSeconds")
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class _Function(msgspec.Struct):
    name: str
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    id: str
    function: _Function


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0


class _Completion(msgspec.Struct):
    choices: list[_Choice]
    usage: _Usage | None = None


_decoder = msgspec.json.Decoder(_Completion)


class OpenAIChatModel:
    def __init__(
        self, name: str, *, api_key: str | None, endpoint: str | None, options: dict[str, Any]
    ) -> None:
        self.name = name
        self._poster = JsonPoster(
            endpoint or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            headers={"authorization": f"Bearer {api_key or 'not-set'}"},
            timeout=float(options.get("timeoutSeconds", 120.0)),
            max_retries=int(options.get("maxRetries", 2)),
        )
        self._defaults = {k: v for k, v in options.items() if k not in CLIENT_OPTIONS}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        kwargs: dict[str, Any] = {**self._defaults, **request.params}
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        body = {"model": self.name, "messages": to_openai_messages(request), **kwargs}
        try:
            completion = await self._poster.post("chat/completions", body, _decoder)
        except ProviderFailure as exc:
            raise map_provider_error("openai", self.name, exc) from exc
        return _response(completion, self.name)

    async def aclose(self) -> None:
        await self._poster.aclose()


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    out.extend(_message(m) for m in request.messages)
    return out


def _message(m: Message) -> dict[str, Any]:
    if m.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    if m.role is Role.ASSISTANT and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content or None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.invalid_args
                        if c.invalid_args is not None
                        else json.dumps(c.args),
                    },
                }
                for c in m.tool_calls
            ],
        }
    return {"role": m.role.value, "content": m.content}


def _response(completion: _Completion, model: str) -> ModelResponse:
    if not completion.choices:
        raise ModelError(
            ErrorCode.E_MODEL_ERROR,
            f"openai model {model!r} answered without any choice",
            suggestion="check that the endpoint is an OpenAI-compatible chat completions API",
        )
    choice = completion.choices[0]
    message = choice.message
    usage = completion.usage or _Usage()
    return ModelResponse(
        text=message.content or "",
        tool_calls=[_tool_call(c) for c in (message.tool_calls or [])],
        usage=Usage(
            input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0
        ),
        finish_reason=choice.finish_reason,
    )


def _tool_call(call: _ToolCall) -> ToolCall:
    raw = call.function.arguments or "{}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError:
        return ToolCall(id=call.id, name=call.function.name, invalid_args=raw)
    if not isinstance(args, dict):
        return ToolCall(id=call.id, name=call.function.name, invalid_args=raw)
    return ToolCall(id=call.id, name=call.function.name, args=args)
