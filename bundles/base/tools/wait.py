"""`wait`: pause the turn for a bounded number of seconds (polling a slow job, rate limits).

The pause is an asyncio sleep, so the agent process keeps answering heartbeats and IPC. The
bound is the Tool config `maxSeconds` (default 300), also stated in the export's schema.
"""

from __future__ import annotations

import asyncio
import time

from bundles.sdk import JsonObject, ToolContext, ToolFailed
from protocol.errors import ErrorCode

DEFAULT_MAX_SECONDS = 300


async def wait(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Sleep `seconds` (0..maxSeconds) and report how long it actually waited."""
    seconds = float(input["seconds"])
    limit = float(ctx.config.get("maxSeconds", DEFAULT_MAX_SECONDS))
    if not 0 <= seconds <= limit:
        raise ToolFailed(
            f"seconds must be between 0 and {limit:g}, got {seconds:g}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    started = time.monotonic()
    await asyncio.sleep(seconds)
    return {"waitedMs": round((time.monotonic() - started) * 1000)}


handlers = {"wait": wait}
