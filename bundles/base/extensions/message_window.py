"""`message-window`: keep only the most recent messages of the conversation.

Before every step, messages beyond the newest `maxMessages` (default 100) are removed from the
conversation (as `remove` MessageEvents, so the trimmed history is what is persisted). System
messages and messages whose metadata has `pinned: true` are always kept and do not count. A tool
result is never left without the assistant message that called it: the cut moves forward past
such results, so providers never see an orphaned tool message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bundles.sdk import Conversation, ExtensionApi, Logger, StepMiddlewareContext

DEFAULT_MAX_MESSAGES = 100


def _kept_always(message: Any) -> bool:
    metadata = getattr(message, "metadata", None) or {}
    return str(message.role) == "system" or bool(metadata.get("pinned"))


def messages_to_drop(messages: Sequence[Any], max_messages: int) -> list[str]:
    """Ids of the oldest messages to remove so that at most `max_messages` remain (pure)."""
    candidates = [m for m in messages if not _kept_always(m)]
    excess = len(candidates) - max_messages
    if excess <= 0:
        return []
    cut = excess
    while cut < len(candidates) and str(candidates[cut].role) == "tool":
        cut += 1  # its assistant message is gone: the result alone would be rejected
    return [m.id for m in candidates[:cut]]


def trim(conversation: Conversation, max_messages: int, logger: Logger) -> int:
    dropped = messages_to_drop(conversation.messages, max_messages)
    for message_id in dropped:
        conversation.remove(message_id)
    if dropped:
        logger.info("message_window.trimmed", removed=len(dropped), max_messages=max_messages)
    return len(dropped)


def _max_messages(config: Mapping[str, Any]) -> int:
    value = config.get("maxMessages", DEFAULT_MAX_MESSAGES)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"config maxMessages must be a positive integer, got {value!r}")
    return value


def register(api: ExtensionApi, config: Mapping[str, Any]) -> None:
    max_messages = _max_messages(config)

    async def window(ctx: StepMiddlewareContext) -> Any:
        trim(ctx.turn.conversation, max_messages, api.logger)
        return await ctx.next()

    api.pipeline.register("step", window)
