"""The one codec: MessagePack for frames and control messages, built once (`encode` and the
control reply's decoder live in `protocol.control_codec`, which a control client imports alone).

Every failure (bad bytes, wrong shape, unknown tag, wrong type) becomes one `ProtocolError`,
so a receiving loop needs exactly one `except` to log the sender and drop the frame.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.control import ControlRequest
from protocol.control_codec import decode_control_reply, decode_with, encode
from protocol.events import AgentEvent
from protocol.messages import Message

__all__ = [
    "decode_control_reply",
    "decode_control_request",
    "decode_event",
    "decode_message",
    "encode",
    "json_dumps",
    "to_builtins",
]

_message_decoder: msgspec.msgpack.Decoder[Message] = msgspec.msgpack.Decoder(Message)
_control_request_decoder: msgspec.msgpack.Decoder[ControlRequest] = msgspec.msgpack.Decoder(
    ControlRequest
)
_event_decoder = msgspec.msgpack.Decoder(AgentEvent)


def decode_message(data: bytes) -> Message:
    return decode_with(_message_decoder, data, "frame")


def decode_control_request(data: bytes) -> ControlRequest:
    return decode_with(_control_request_decoder, data, "control request")


def decode_event(data: bytes) -> AgentEvent:
    return decode_with(_event_decoder, data, "event")


def to_builtins(obj: Any) -> Any:
    """Wire Struct -> plain JSON-able Python values (for JSON output and logs)."""
    return msgspec.to_builtins(obj)


def json_dumps(obj: Any) -> bytes:
    return msgspec.json.encode(obj)
