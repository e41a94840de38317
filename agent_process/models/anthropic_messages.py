"""`provider: anthropic` through the official SDK (Messages API with tool_use blocks).

`Model.spec.endpoint` becomes `base_url`. `Model.spec.options`: `maxRetries`, `timeoutSeconds`,
`maxTokens` (default 4096), `promptCaching` (default true: `anthropic_cache.py`); anything else
goes to `messages.create`. Tool results are sent as
`tool_result` blocks in a user turn; consecutive same-role messages are merged, as the API wants.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic

from agent_process.models import anthropic_cache as cache
from agent_process.models.anthropic_stream import stream_messages
from agent_process.models.base import ModelRequest, ModelResponse
from agent_process.models.errors import map_provider_error
from agent_process.models.tls import tls_context
from protocol.conversation import Message, Role
from protocol.conversation import ToolCall as Call

CLIENT_OPTIONS = ("maxRetries", "timeoutSeconds", "maxTokens", "promptCaching")


class AnthropicModel:
    def __init__(
        self, name: str, *, api_key: str | None, endpoint: str | None, options: dict[str, Any]
    ) -> None:
        self.name = name
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "not-set",
            base_url=endpoint,
            max_retries=int(options.get("maxRetries", 2)),
            timeout=float(options.get("timeoutSeconds", 120.0)),
            http_client=anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        )
        self._max_tokens = int(options.get("maxTokens", 4096))
        self._caching = options.get("promptCaching", True) is not False
        self._defaults = {k: v for k, v in options.items() if k not in CLIENT_OPTIONS}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        kwargs: dict[str, Any] = {"max_tokens": self._max_tokens, **self._defaults}
        kwargs.update(request.params)
        if request.system:
            kwargs["system"] = request.system
        if request.tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        messages = to_anthropic_messages(request.messages)
        if self._caching:
            cache.add_breakpoints(kwargs, messages)
        if request.on_text is not None:  # a streamed turn (ARCHITECTURE.md §4)
            final = await stream_messages(self._client, self.name, messages, kwargs,
                                          request.on_text)  # fmt: skip
            return _response(final)
        try:
            reply = await self._client.messages.create(
                model=self.name, messages=cast(Any, messages), **kwargs
            )
        except anthropic.AnthropicError as exc:
            raise map_provider_error("anthropic", self.name, exc) from exc
        return _response(reply)

    async def aclose(self) -> None:
        await self._client.close()


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        role, blocks = _blocks(m)
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _blocks(m: Message) -> tuple[str, list[dict[str, Any]]]:
    if m.role is Role.TOOL:
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": m.tool_call_id,
            "content": m.content,
        }
        if m.metadata.get("status") == "error":
            block["is_error"] = True
        return "user", [block]
    if m.role is Role.ASSISTANT:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in m.tool_calls
        )
        return "assistant", blocks
    # user and (kept) system messages of the conversation go in as user text
    text = m.content if m.role is Role.USER else f"[system] {m.content}"
    return "user", [{"type": "text", "text": text}]


def _response(reply: Any) -> ModelResponse:
    texts: list[str] = []
    calls: list[Call] = []
    for block in reply.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            args = block.input if isinstance(block.input, dict) else {}
            raw = None if isinstance(block.input, dict) else json.dumps(block.input)
            calls.append(Call(id=block.id, name=block.name, args=args, invalid_args=raw))
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        usage=cache.usage_of(reply.usage),
        finish_reason=reply.stop_reason,
    )
