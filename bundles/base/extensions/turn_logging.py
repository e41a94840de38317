"""`logging`: one structured log line per turn, step and tool call, with durations.

Lines go to the agent's log through the extension's structlog logger (JSON lines under
`logs/<swarm>/`). Settings: `level` (debug, info or warning; default info), `includeArgs`
(log tool arguments; default false, since they can carry user data) and `maxChars` (cut long
values; default 300).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from bundles.sdk import (
    ExtensionApi,
    StepMiddlewareContext,
    ToolCallMiddlewareContext,
    TurnMiddlewareContext,
)

LEVELS = ("debug", "info", "warning")


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _clip(value: Any, max_chars: int) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= max_chars else text[:max_chars] + "..."


def _settings(config: Mapping[str, Any]) -> tuple[str, bool, int]:
    level = config.get("level", "info")
    if level not in LEVELS:
        raise ValueError(f"config level must be one of {', '.join(LEVELS)}, got {level!r}")
    max_chars = config.get("maxChars", 300)
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"config maxChars must be a positive integer, got {max_chars!r}")
    return level, bool(config.get("includeArgs", False)), max_chars


def register(api: ExtensionApi, config: Mapping[str, Any]) -> None:
    level, include_args, max_chars = _settings(config)
    emit: Callable[..., Any] = getattr(api.logger, level)

    async def turn(ctx: TurnMiddlewareContext) -> Any:
        started = time.perf_counter()
        emit("turn.begin", turn_id=ctx.turn_id, input=_clip(ctx.event.input, max_chars))
        result = await ctx.next()
        error = getattr(result, "error", None)
        emit(
            "turn.end",
            turn_id=ctx.turn_id,
            outcome=str(getattr(result, "outcome", "")),
            steps=getattr(result, "steps", None),
            error_code=getattr(error, "code", None),
            duration_ms=_elapsed_ms(started),
        )
        return result

    async def step(ctx: StepMiddlewareContext) -> Any:
        started = time.perf_counter()
        result = await ctx.next()
        calls = [call.name for call in getattr(result, "tool_calls", [])]
        emit(
            "step.end",
            turn_id=ctx.turn.turn_id,
            step=ctx.index,
            catalog=len(ctx.tool_catalog),
            tool_calls=calls,
            duration_ms=_elapsed_ms(started),
        )
        return result

    async def tool_call(ctx: ToolCallMiddlewareContext) -> Any:
        started = time.perf_counter()
        fields: dict[str, Any] = {"tool": ctx.tool_name, "tool_call_id": ctx.tool_call_id}
        if include_args:
            fields["args"] = _clip(ctx.args, max_chars)
        result = await ctx.next()
        error = getattr(result, "error", None)
        emit(
            "tool.end",
            **fields,
            status=str(getattr(result, "status", "")),
            error_code=getattr(error, "code", None),
            duration_ms=_elapsed_ms(started),
        )
        return result

    api.pipeline.register("turn", turn)
    api.pipeline.register("step", step)
    api.pipeline.register("toolCall", tool_call)
