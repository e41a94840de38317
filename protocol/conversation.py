"""Conversation messages and the MessageEvents that change them (event-sourced, ARCHITECTURE.md §6).

The model lives in `protocol` because two sides use it: the agent process writes a conversation
(`agent_process.store`), the CLI and Studio read it (`protocol.transcript`).

`NextMessages = Base + Σ Events`. Applying an event is idempotent (appending an id that is already
present replaces it in place, removing a missing id does nothing), so replaying events that were
already folded into the base (a crash between the base rename and the events truncation) yields
the same list.
"""

from __future__ import annotations

import time
import uuid
from enum import StrEnum
from typing import Any

import msgspec


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """A call the model asked for. `invalid_args` holds the raw text when it was not JSON."""

    id: str
    name: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    invalid_args: str | None = None


class Message(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """One message; `id` is stable for the life of the conversation."""

    id: str
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    turn_id: str | None = None
    created_at: float = 0.0
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


def new_message_id() -> str:
    return "m_" + uuid.uuid4().hex


def new_message(role: Role, content: str = "", **fields: Any) -> Message:
    return Message(
        id=new_message_id(), role=role, content=content, created_at=time.time(), **fields
    )


class _Event(msgspec.Struct, kw_only=True, tag_field="type", omit_defaults=True, rename="camel"):
    at: float = 0.0


class AppendEvent(_Event, tag="append"):
    message: Message


class ReplaceEvent(_Event, tag="replace"):
    message_id: str
    message: Message


class RemoveEvent(_Event, tag="remove"):
    message_id: str


class TruncateEvent(_Event, tag="truncate"):
    """Remove every message (the conversation starts over)."""


MessageEvent = AppendEvent | ReplaceEvent | RemoveEvent | TruncateEvent


def apply_event(messages: list[Message], event: MessageEvent) -> None:
    """Apply one event in place (idempotent, see the module docstring)."""
    match event:
        case AppendEvent(message=msg):
            _put(messages, msg.id, msg, append_missing=True)
        case ReplaceEvent(message_id=mid, message=msg):
            _put(messages, mid, msg, append_missing=False)
        case RemoveEvent(message_id=mid):
            messages[:] = [m for m in messages if m.id != mid]
        case TruncateEvent():
            messages.clear()


def _put(messages: list[Message], mid: str, msg: Message, *, append_missing: bool) -> None:
    # Scan from the end: appends and replaces almost always touch the newest messages.
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].id == mid:
            messages[i] = msg
            return
    if append_missing:
        messages.append(msg)


def dangling_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no tool result after them: what a
    process killed mid-step leaves behind. Providers reject such a history, so the next turn
    answers them first."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg.role is Role.ASSISTANT and msg.tool_calls:
            answered = {m.tool_call_id for m in messages[i + 1 :] if m.role is Role.TOOL}
            return [c for c in msg.tool_calls if c.id not in answered]
        if msg.role is Role.USER:
            return []
    return []
