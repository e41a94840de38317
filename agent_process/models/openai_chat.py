"""`provider: openai` through the official SDK (Chat Completions, standard tool-call format).

`Model.spec.endpoint` becomes the client's `base_url`, so any OpenAI-compatible server works.
`Model.spec.options`: `maxRetries` (SDK retries, default 2), `timeoutSeconds`; anything else is
passed to `chat.completions.create` (the agent's `modelConfig.params` override it).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import openai

from agent_process.models.base import ModelError, ModelRequest, ModelResponse, Usage
from agent_process.models.errors import map_provider_error
from agent_process.models.openai_stream import Streamed, stream_chat
from agent_process.models.tls import tls_context
from protocol.conversation import Message, Role, ToolCall
from protocol.errors import ErrorCode

CLIENT_OPTIONS = ("maxRetries", "timeoutSeconds")


class OpenAIChatModel:
    def __init__(
        self, name: str, *, api_key: str | None, endpoint: str | None, options: dict[str, Any]
    ) -> None:
        self.name = name
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "not-set",
            base_url=endpoint,
            max_retries=int(options.get("maxRetries", 2)),
            timeout=float(options.get("timeoutSeconds", 120.0)),
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
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
        if request.on_text is not None:  # a streamed turn (ARCHITECTURE.md §4)
            streamed = await stream_chat(self._client, self.name, body, request.on_text)
            return _streamed_response(streamed)
        try:
            # `post` with the same body as `chat.completions.create`: create's type-driven
            # transform of the params costs time per message, so a turn got slower with
            # every message of its history (see tests/bench/bench_agents_request.py). The
            # request and errors are the same.
            # The SDK sends, retries and maps HTTP errors; its pydantic model of the reply is
            # skipped: the raw body is decoded into the few fields a turn reads (msgspec).
            raw = await self._client.post("/chat/completions", body=body, cast_to=bytes)
        except openai.OpenAIError as exc:
            raise map_provider_error("openai", self.name, exc) from exc
        try:
            completion = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise _bad_reply(self.name, str(exc)) from exc
        if not completion.choices:
            raise _bad_reply(self.name, "the reply has no choices")
        return _response(completion)

    async def aclose(self) -> None:
        await self._client.close()


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


class _Function(msgspec.Struct):
    name: str = ""
    arguments: str | None = None


class _Call(msgspec.Struct):
    id: str = ""
    function: _Function = msgspec.field(default_factory=_Function)


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_Call] | None = None


class _Choice(msgspec.Struct):
    message: _Message = msgspec.field(default_factory=_Message)
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = 0


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: _PromptDetails | None = None
    """`cached_tokens`: the part of the prompt read from the provider's cache."""


class _Completion(msgspec.Struct):
    """The parts of a chat completion a turn reads; everything else is ignored."""

    choices: list[_Choice] = msgspec.field(default_factory=list)
    usage: _Usage | None = None


_decoder = msgspec.json.Decoder(_Completion)


def _bad_reply(model: str, why: str) -> ModelError:
    return ModelError(
        ErrorCode.E_MODEL_ERROR,
        f"openai model {model!r}: the server's chat completion is unusable: {why}",
        suggestion="check that the endpoint speaks the OpenAI Chat Completions API",
    )


def _response(completion: _Completion) -> ModelResponse:
    choice = completion.choices[0]
    message = choice.message
    calls = [_tool_call(c) for c in (message.tool_calls or [])]
    usage = completion.usage
    details = usage.prompt_tokens_details if usage is not None else None
    return ModelResponse(
        text=message.content or "",
        tool_calls=calls,
        usage=Usage(
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cached_input_tokens=getattr(details, "cached_tokens", 0) or 0,
        ),
        finish_reason=choice.finish_reason,
    )


def _streamed_response(streamed: Streamed) -> ModelResponse:
    calls = [_tool_call(_Call(id=i, function=_Function(name=n, arguments=a)))
             for i, n, a in streamed.calls]  # fmt: skip
    return ModelResponse(text=streamed.text, tool_calls=calls, usage=streamed.usage,
                         finish_reason=streamed.finish_reason)  # fmt: skip


def _tool_call(call: _Call) -> ToolCall:
    raw = call.function.arguments or "{}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError:
        return ToolCall(id=call.id, name=call.function.name, invalid_args=raw)
    if not isinstance(args, dict):
        return ToolCall(id=call.id, name=call.function.name, invalid_args=raw)
    return ToolCall(id=call.id, name=call.function.name, args=args)
