"""The conversation model, kept importable here for handler and extension code written against
this path; it lives in `protocol.conversation` (readers outside the agent process use it too)."""

from protocol.conversation import (
    AppendEvent,
    Message,
    MessageEvent,
    RemoveEvent,
    ReplaceEvent,
    Role,
    ToolCall,
    TruncateEvent,
    apply_event,
    dangling_calls,
    new_message,
    new_message_id,
)

__all__ = [
    "AppendEvent",
    "Message",
    "MessageEvent",
    "RemoveEvent",
    "ReplaceEvent",
    "Role",
    "ToolCall",
    "TruncateEvent",
    "apply_event",
    "dangling_calls",
    "new_message",
    "new_message_id",
]
