"""`message-compaction`: fold old messages into one summary message when the history grows.

Before every step, when the conversation holds more than `maxMessages` (default 80) countable
messages or more than `maxChars` (default 200000, about 50k tokens) characters of content, the
older messages are replaced by one summary and the newest `keepMessages` (default 20) stay as
they are. System messages and messages whose metadata has `pinned: true` are never compacted
and do not count; the agent's system prompt is not part of the conversation, so it is always
sent. A tool result is never separated from the assistant message that called it.

The summary takes the place of the oldest compacted user message (a `replace` event, so its
position before the kept messages is preserved); the other compacted messages are removed.
It starts with `SUMMARY_HEADER`, so the next compaction folds the previous summary's lines
into the new one instead of summarizing a summary.

The summarizer is deterministic (`summarizer: first-lines`, the only one): one line per
message with its role and the first line of its text (cut at `lineChars`, default 200); tool
calls are listed by name, tool results by tool and status. The summary keeps its newest lines
within `maxSummaryChars` (default 4000). Asking the model for a summary is not offered: the
extension API gives extensions no access to the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from bundles.sdk import Conversation, ExtensionApi, StepMiddlewareContext

SUMMARY_HEADER = "[Summary of earlier conversation]"
OMITTED = "- ... ({n} earlier lines omitted)"


def _positive(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"config {key} must be a positive integer, got {value!r}")
    return value


class Settings(NamedTuple):
    # a NamedTuple, not a dataclass: entry files load without a sys.modules entry
    max_messages: int = 80
    max_chars: int = 200_000
    keep_messages: int = 20
    line_chars: int = 200
    max_summary_chars: int = 4000

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        summarizer = config.get("summarizer", "first-lines")
        if summarizer != "first-lines":
            raise ValueError(f"config summarizer must be first-lines, got {summarizer!r}")
        settings = cls(
            max_messages=_positive(config, "maxMessages", 80),
            max_chars=_positive(config, "maxChars", 200_000),
            keep_messages=_positive(config, "keepMessages", 20),
            line_chars=_positive(config, "lineChars", 200),
            max_summary_chars=_positive(config, "maxSummaryChars", 4000),
        )
        if settings.keep_messages >= settings.max_messages:
            raise ValueError("config keepMessages must be smaller than maxMessages")
        return settings


class Plan(NamedTuple):
    anchor_id: str
    """The message whose content becomes the summary."""
    remove_ids: list[str]
    summary: str
    compacted: int


def _role(message: Any) -> str:
    return str(getattr(message.role, "value", message.role))


def _kept_always(message: Any) -> bool:
    metadata = getattr(message, "metadata", None) or {}
    return _role(message) == "system" or bool(metadata.get("pinned"))


def _first_line(text: str, limit: int) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _line(message: Any, limit: int) -> str:
    role = _role(message)
    text = _first_line(message.content, limit)
    if role == "assistant" and getattr(message, "tool_calls", None):
        called = ", ".join(call.name for call in message.tool_calls)
        return f"- assistant called {called}" + (f": {text}" if text else "")
    if role == "tool":
        status = (getattr(message, "metadata", None) or {}).get("status", "done")
        return f"- tool {message.tool_name or '?'} ({status}): {text}"
    return f"- {role}: {text}"


def summarize(messages: Sequence[Any], settings: Settings) -> str:
    """The deterministic summary of `messages` (pure)."""
    lines: list[str] = []
    for message in messages:
        if message.content.startswith(SUMMARY_HEADER):
            lines.extend(message.content.splitlines()[1:])  # fold the previous summary in
        else:
            lines.append(_line(message, settings.line_chars))
    budget = settings.max_summary_chars - len(SUMMARY_HEADER) - len(OMITTED) - 10
    kept: list[str] = []
    used = 0
    for line in reversed(lines):  # the newest lines matter most
        if used + len(line) + 1 > budget:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    omitted = len(lines) - len(kept)
    head = [SUMMARY_HEADER] + ([OMITTED.format(n=omitted)] if omitted else [])
    return "\n".join(head + kept)


def _keep_count(candidates: int, chars: int, settings: Settings) -> int | None:
    """How many recent messages to keep, or None when no threshold is crossed."""
    if candidates > settings.max_messages:
        return settings.keep_messages
    if chars > settings.max_chars:
        return min(settings.keep_messages, candidates // 2)
    return None


def plan(messages: Sequence[Any], settings: Settings) -> Plan | None:
    """What to compact now, or None (pure)."""
    candidates = [m for m in messages if not _kept_always(m)]
    keep = _keep_count(len(candidates), sum(len(m.content) for m in messages), settings)
    if keep is None:
        return None
    cut = len(candidates) - keep
    while cut < len(candidates) and _role(candidates[cut]) == "tool":
        cut += 1  # a kept tool result needs the assistant message that called it
    old = candidates[:cut]
    anchor = next((m for m in old if _role(m) == "user"), None)
    if anchor is None or len(old) < 2:
        return None
    return Plan(
        anchor_id=anchor.id,
        remove_ids=[m.id for m in old if m is not anchor],
        summary=summarize(old, settings),
        compacted=len(old),
    )


def compact(conversation: Conversation, settings: Settings) -> Plan | None:
    found = plan(conversation.messages, settings)
    if found is not None:
        conversation.replace(found.anchor_id, found.summary)
        for message_id in found.remove_ids:
            conversation.remove(message_id)
    return found


def register(api: ExtensionApi, config: Mapping[str, Any]) -> None:
    settings = Settings.from_config(config)

    async def step(ctx: StepMiddlewareContext) -> Any:
        done = compact(ctx.turn.conversation, settings)
        if done is not None:
            api.logger.info(
                "message_compaction.compacted",
                messages=done.compacted,
                summary_chars=len(done.summary),
            )
            api.events.emit("compaction.completed", {"messages": done.compacted})
        return await ctx.next()

    api.pipeline.register("step", step)
