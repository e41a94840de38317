"""`agents`: talk to the other agents of the Swarm through the orchestrator.

Every export calls `ctx.runtime` (the agents bridge of the agent process): `request` and `send`
travel as events, `spawn`, `list` and `catalog` as calls answered by the orchestrator. Nothing
is short-cut in-process; failures come back as `ToolFailed` with an `E_AGENT_*` code.
"""

from __future__ import annotations

from typing import Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed
from protocol.errors import ErrorCode

DEFAULT_TIMEOUT_MS = 60_000


def _text(input: JsonObject, name: str, *, required: bool = True) -> str | None:
    value = input.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise ToolFailed(f"{name} must be a non-empty string", code=ErrorCode.E_TOOL_INVALID_ARGS)
    return value


def _metadata(input: JsonObject) -> dict[str, Any] | None:
    value = input.get("metadata")
    if value is not None and not isinstance(value, dict):
        raise ToolFailed("metadata must be an object", code=ErrorCode.E_TOOL_INVALID_ARGS)
    return value


async def request(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Send `input` to `target` and (unless `async`) wait for its reply."""
    timeout_ms = input.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if not isinstance(timeout_ms, int) or timeout_ms < 1:
        raise ToolFailed("timeoutMs must be a positive integer", code=ErrorCode.E_TOOL_INVALID_ARGS)
    return await ctx.runtime.request(
        str(_text(input, "target")),
        str(_text(input, "input", required=False) or ""),
        instance_key=_text(input, "instanceKey", required=False),
        event_type=_text(input, "eventType", required=False) or "agent.request",
        timeout_ms=timeout_ms,
        async_=bool(input.get("async", False)),
        metadata=_metadata(input),
    )


async def send(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Fire-and-forget: deliver `input` to `target` (spawned on demand)."""
    return await ctx.runtime.send(
        str(_text(input, "target")),
        str(_text(input, "input", required=False) or ""),
        instance_key=_text(input, "instanceKey", required=False),
        event_type=_text(input, "eventType", required=False) or "agent.send",
        metadata=_metadata(input),
    )


async def spawn(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Prepare an instance of a Swarm agent; `cwd` becomes that instance's workdir."""
    return await ctx.runtime.spawn(
        str(_text(input, "target")),
        instance_key=_text(input, "instanceKey", required=False),
        cwd=_text(input, "cwd", required=False),
    )


async def list_(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Instances this agent spawned (all agent instances with `includeAll`)."""
    return await ctx.runtime.list(include_all=bool(input.get("includeAll", False)))


async def catalog(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """The Swarm's agents and which of them this agent may call."""
    return await ctx.runtime.catalog()


handlers = {"request": request, "send": send, "spawn": spawn, "list": list_, "catalog": catalog}
