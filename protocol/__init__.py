"""The wire contract shared by the orchestrator and its children (stdlib + msgspec only).

The names below are loaded from their modules on first use (PEP 562): importing one module of
the package, as `goondan send` imports `protocol.control`, does not load the frame and event
types with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol.codec import (
        decode_control_reply,
        decode_control_request,
        decode_event,
        decode_message,
        encode,
    )
    from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
    from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, TraceContext
    from protocol.ids import ORCHESTRATOR, Address, ProcessId, ProcessKind
    from protocol.messages import PROTOCOL_VERSION, Message

_HOME = {
    "codec": ("decode_control_reply", "decode_control_request", "decode_event",
              "decode_message", "encode"),
    "errors": ("ErrorCode", "ErrorInfo", "ProtocolError"),
    "events": ("AgentEvent", "ReplyTo", "Source", "SourceKind", "TraceContext"),
    "ids": ("ORCHESTRATOR", "Address", "ProcessId", "ProcessKind"),
    "messages": ("PROTOCOL_VERSION", "Message"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:  # `from protocol import backoff` then imports the submodule
        raise AttributeError(f"module 'protocol' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"protocol.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ORCHESTRATOR",
    "PROTOCOL_VERSION",
    "Address",
    "AgentEvent",
    "ErrorCode",
    "ErrorInfo",
    "Message",
    "ProcessId",
    "ProcessKind",
    "ProtocolError",
    "ReplyTo",
    "Source",
    "SourceKind",
    "TraceContext",
    "decode_control_reply",
    "decode_control_request",
    "decode_event",
    "decode_message",
    "encode",
]
