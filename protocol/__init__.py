"""The wire contract shared by the orchestrator and its children (stdlib + msgspec only)."""

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
