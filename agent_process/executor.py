"""Run one tool: validate the arguments, call the handler, return data (ARCHITECTURE.md §6).

Async handlers run on the loop; plain `def` handlers run in a worker thread so the loop keeps
serving IPC while they block. A per-export `timeoutMs` bounds either (a timed-out thread cannot
be killed: it finishes in the background and its result is dropped). Nothing a handler does
escapes `execute`: every exception becomes an error result through
`results.result_from_exception`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from agent_process.limits import as_limit_error
from agent_process.registry import ToolEntry
from agent_process.results import ToolResult, cap_output, ok_result, result_from_exception
from bundles.limits import NO_LIMITS, Limits
from bundles.sdk import ToolContext, ToolFailed
from protocol.errors import ErrorCode


async def execute(
    entry: ToolEntry,
    ctx: ToolContext,
    args: Any,
    default_timeout_ms: int | None = None,
    limits: Limits = NO_LIMITS,
) -> ToolResult:
    """The handler's result as data. `default_timeout_ms` bounds an export with no
    `timeoutMs` (Swarm.spec.policy.tools); `limits` (the agent's) say which failures are
    breaches."""
    try:
        if entry.validator is not None:
            entry.validator.validate(args)
        value = await _invoke(entry, ctx, args, entry.timeout_ms or default_timeout_ms)
        return cap_output(_as_result(value), entry.result_limit)
    except UnicodeEncodeError as exc:
        return result_from_exception(_unencodable(entry, args, exc), entry.error_message_limit)
    except Exception as exc:  # a breach of Agent.spec.limits is E_AGENT_LIMIT
        return result_from_exception(as_limit_error(exc, limits), entry.error_message_limit)


def _unencodable(entry: ToolEntry, args: Any, exc: UnicodeEncodeError) -> Exception:
    """json.loads lets a lone surrogate ("\\ud800") through from a model's arguments; no path,
    process or validator can encode it, so it is the caller's error, not the tool's (found by
    tests/fuzz/test_tool_args)."""
    try:
        json.dumps(args, ensure_ascii=False, default=str).encode()
    except UnicodeEncodeError:
        return ToolFailed(
            f"the arguments of {entry.name} hold text that is not valid Unicode "
            "(a lone surrogate such as \\ud800)",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="send the arguments as valid UTF-8 text",
        )
    return exc


async def _invoke(entry: ToolEntry, ctx: ToolContext, args: Any, timeout_ms: int | None) -> Any:
    if timeout_ms is None:
        return await _call(entry, ctx, args)
    try:
        async with asyncio.timeout(timeout_ms / 1000) as scope:
            return await _call(entry, ctx, args)
    except TimeoutError:
        if not scope.expired():
            raise  # the handler's own TimeoutError: an ordinary failure
        raise ToolFailed(
            f"{entry.name} did not finish within its timeout of {timeout_ms} ms",
            code=ErrorCode.E_TOOL_TIMEOUT,
            suggestion="retry with a smaller request, or raise timeoutMs on the export "
            "(or Swarm.spec.policy.tools.defaultTimeoutMs)",
        ) from None


async def _call(entry: ToolEntry, ctx: ToolContext, args: Any) -> Any:
    if entry.is_async:
        return await entry.handler(ctx, args)
    value = await asyncio.to_thread(entry.handler, ctx, args)
    if inspect.isawaitable(value):  # a plain function that returned a coroutine
        value = await value
    return value


def _as_result(value: Any) -> ToolResult:
    try:
        return ok_result(value)
    except (TypeError, ValueError) as exc:
        raise ToolFailed(
            f"the handler returned a value that cannot be sent to the model: {exc}",
            code=ErrorCode.E_TOOL_INVALID_RESULT,
            suggestion="return JSON data: dict, list, str, int, float, bool, None or a Struct",
        ) from exc
