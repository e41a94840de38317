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
from collections.abc import Iterable
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


def fold(messages: list[Message], events: Iterable[MessageEvent]) -> None:
    """`apply_event` of each of `events` in turn, in time linear in their number and the list's
    length. `apply_event` alone scans the list for each append (is that id there already?):
    folding a history that way is quadratic, 0.7 s for 14,000 events of a 7,000-message
    conversation, and a cluster node folds the whole history of each instance that moves to it
    (docs/cluster.md, Faults). The index holds each id's last position, which the scan from the
    end finds."""
    at = {m.id: i for i, m in enumerate(messages)}
    for event in events:
        match event:
            case AppendEvent(message=msg):
                i = at.get(msg.id)
                if i is None:
                    at[msg.id] = len(messages)
                    messages.append(msg)
                else:
                    _set(messages, at, i, msg.id, msg)
            case ReplaceEvent(message_id=mid, message=msg):
                i = at.get(mid)
                if i is not None:
                    _set(messages, at, i, mid, msg)
            case RemoveEvent(message_id=mid):
                if mid in at:
                    messages[:] = [m for m in messages if m.id != mid]
                    _index(messages, at)
            case TruncateEvent():
                messages.clear()
                at.clear()


def _set(messages: list[Message], at: dict[str, int], i: int, mid: str, msg: Message) -> None:
    messages[i] = msg
    if msg.id != mid:  # a replace that changed the id (goondan never makes one): index again
        _index(messages, at)


def _index(messages: list[Message], at: dict[str, int]) -> None:
    at.clear()
    at.update((m.id, i) for i, m in enumerate(messages))


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
