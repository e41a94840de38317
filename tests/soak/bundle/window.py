"""Turn middleware: after each turn keep only the newest `keep` messages.

The soak looks for leaks, so the conversation (which legitimately grows with every turn when
nothing trims it) is bounded here, as a production bundle would with message-window.
"""

from __future__ import annotations

from typing import Any


def register(api: Any, config: dict[str, Any]) -> None:
    keep = int(config.get("keep", 40))

    async def turn(ctx: Any) -> Any:
        result = await ctx.next()
        messages = ctx.conversation.messages
        for message in messages[: max(len(messages) - keep, 0)]:
            ctx.conversation.remove(message.id)
        return result

    api.pipeline.register("turn", turn)
