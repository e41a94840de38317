"""The one small interface every model provider implements, and its coded error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from agent_process.catalog import CatalogItem
from protocol.conversation import Message, ToolCall
from protocol.errors import ErrorCode, ErrorInfo


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    input_tokens: int = 0
    """Every input token, those read from the provider's prompt cache included."""
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """The part of `input_tokens` read from the prompt cache (priced lower)."""

    def as_dict(self) -> dict[str, int]:
        out = {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens}
        if self.cached_input_tokens:
            out["cachedInputTokens"] = self.cached_input_tokens
        return out


class ModelRequest(msgspec.Struct, kw_only=True):
    system: str | None
    """The agent's system prompt, sent on every step."""
    messages: list[Message]
    tools: list[CatalogItem]
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    """`Agent.spec.modelConfig.params` (temperature, max_tokens, ...)."""
    on_text: Callable[[str], None] | None = None
    """Set when someone waits for the text as it is written (ARCHITECTURE.md §4, `delta`):
    the provider streams and hands each piece here as it arrives. The response is the same
    either way (text, tool calls, usage)."""


class ModelResponse(msgspec.Struct, kw_only=True):
    text: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    usage: Usage = msgspec.field(default_factory=Usage)
    finish_reason: str | None = None


class ModelError(Exception):
    """A provider failure after the SDK's own retries: fails the turn with this code."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        suggestion: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.info = ErrorInfo(
            code=code.value, message=message, name=type(self).__name__, suggestion=suggestion
        )
        self.status = status
        """The provider's HTTP status (None: no answer, e.g. a timeout)."""
        self.retry_after = retry_after
        """Seconds the provider asked to wait (its `retry-after` header), if it said."""


class Model(Protocol):
    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None: ...


def usage_sum(a: dict[str, int], b: Usage) -> dict[str, int]:
    out = dict(a)
    for key, value in b.as_dict().items():
        out[key] = out.get(key, 0) + value
    return out
