"""Turn middleware: input `history` is answered with how many messages the turn starts with.

After the orchestrator is SIGKILLed and restarted, a non-zero count proves the new process
replayed the old conversation.
"""

from __future__ import annotations

from typing import Any

import msgspec


def register(api: Any, config: dict[str, Any]) -> None:
    async def turn(ctx: Any) -> Any:
        if ctx.event.input != "history":
            return await ctx.next()
        seen = len(ctx.conversation.messages)
        result = await ctx.next()
        return msgspec.structs.replace(result, text=f"history {seen}")

    api.pipeline.register("turn", turn)
