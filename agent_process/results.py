"""Tool results are data (ARCHITECTURE.md §6), and exactly one function turns exceptions into that
data.

`result_from_exception` is the only place that maps what a handler (or middleware, or the
executor itself) raised to `{status: error, error: {code, name, message, suggestion, helpUrl}}`,
and the only place that cuts the message to the Tool's `errorMessageLimit`.
"""

from __future__ import annotations

from enum import StrEnum
from traceback import format_exception
from typing import Any

import msgspec

from bundles.sdk import CallDeferred, MiddlewareError, Pending, ToolFailed
from protocol.errors import ErrorCode, ErrorInfo

TRACEBACK_CHARS = 8000
"""The end of a traceback kept for the log and the runtime event."""
TRUNCATION_SUFFIX = "... (truncated)"
DEFAULT_ERROR_MESSAGE_LIMIT = 1000

_result_encoder = msgspec.json.Encoder()


class ResultStatus(StrEnum):
    OK = "ok"
    PENDING = "pending"
    ERROR = "error"


class DeferredRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A handler raised `CallDeferred`: the call must run on the client (ARCHITECTURE.md §10)."""

    method: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    message: str | None = None


class ToolResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    status: ResultStatus
    output: Any = None
    handle: str | None = None
    error: ErrorInfo | None = None
    deferred: DeferredRequest | None = None
    """Set (with status `pending`) until the deferred hook resolves the call; never sent."""
    traceback: str | None = None
    """Where an unexpected exception came from: for the log and the runtime event, never
    for the model."""

    def to_model_text(self) -> str:
        """The JSON text the model receives as the tool message content."""
        shown = msgspec.structs.replace(self, deferred=None, traceback=None)
        return _result_encoder.encode(shown).decode()


def ok_result(value: Any) -> ToolResult:
    """What a handler returned: `Pending` -> pending; anything else must be JSON-able."""
    if isinstance(value, Pending):
        return ToolResult(
            status=ResultStatus.PENDING,
            handle=value.handle,
            output=msgspec.to_builtins(value.output),
        )
    return ToolResult(status=ResultStatus.OK, output=msgspec.to_builtins(value))


def error_result(
    code: ErrorCode | str, message: str, *, limit: int = DEFAULT_ERROR_MESSAGE_LIMIT, **kw: Any
) -> ToolResult:
    return result_from_exception(ToolFailed(message, code=str(code), **kw), limit)


def truncate_message(message: str, limit: int) -> str:
    """Cut to `limit` characters with the suffix inside the limit (ARCHITECTURE.md §6)."""
    if len(message) <= limit:
        return message
    keep = max(0, limit - len(TRUNCATION_SUFFIX))
    return (message[:keep] + TRUNCATION_SUFFIX)[: max(limit, 0)]


def result_from_exception(exc: BaseException, limit: int) -> ToolResult:
    """THE exception -> data map of the tool system (STYLE habit 8)."""
    if isinstance(exc, CallDeferred):
        return ToolResult(
            status=ResultStatus.PENDING,
            deferred=DeferredRequest(method=exc.method, params=exc.params, message=exc.message),
        )
    if isinstance(exc, ToolFailed | MiddlewareError):
        code, message = exc.code, exc.message
        suggestion, help_url = exc.suggestion, exc.help_url
        name = type(exc).__name__
    else:
        code, name = ErrorCode.E_TOOL.value, type(exc).__name__
        message = str(exc) or name
        suggestion = help_url = None
    unexpected = not isinstance(exc, ToolFailed | MiddlewareError)
    return ToolResult(
        status=ResultStatus.ERROR,
        error=ErrorInfo(
            code=code,
            name=name,
            message=truncate_message(message, limit),
            suggestion=suggestion,
            help_url=help_url,
        ),
        traceback="".join(format_exception(exc))[-TRACEBACK_CHARS:] if unexpected else None,
    )


def cap_output(result: ToolResult, limit: int) -> ToolResult:
    """A result whose JSON is over `limit` characters: its start, as text, and a marker."""
    if result.status is not ResultStatus.OK or result.output is None:
        return result
    text = result.output if isinstance(result.output, str) else _json(result.output)
    if len(text) <= limit:
        return result
    marker = f"... (truncated: {limit} of {len(text)} characters; ask for less)"
    return msgspec.structs.replace(result, output=text[: max(0, limit - len(marker))] + marker)


def _json(value: Any) -> str:
    return _result_encoder.encode(value).decode()
