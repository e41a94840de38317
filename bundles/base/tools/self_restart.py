"""`self-restart`: ask the orchestrator to restart this swarm's processes gracefully.

The restart happens after the current turn completes (the orchestrator drains each process:
`shutdown` with reason `restart`, then respawns it; conversation history is kept). The call goes
through `ctx.runtime.restart(reason)` when the agent process provides it; a runtime without that
operation (or no runtime, e.g. a tool run outside a daemon) gets `E_AGENT_NOT_CONNECTED`.
"""

from __future__ import annotations

import inspect
from typing import Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed
from protocol.errors import ErrorCode


async def request(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Request a graceful restart; returns what the orchestrator answered."""
    reason = str(input.get("reason") or "requested by the agent")
    restart = getattr(ctx.runtime, "restart", None)
    if not callable(restart):
        raise ToolFailed(
            "this agent process cannot reach an orchestrator that restarts swarms",
            code=ErrorCode.E_AGENT_NOT_CONNECTED,
            suggestion="Run the agent under `goondan run`, or restart it with `goondan restart`.",
        )
    answer: Any = restart(reason)
    if inspect.isawaitable(answer):
        answer = await answer
    ctx.logger.info("self_restart.requested", reason=reason)
    result: JsonObject = {"requested": True, "reason": reason}
    if isinstance(answer, dict):
        result["orchestrator"] = answer
    return result


handlers = {"request": request}
