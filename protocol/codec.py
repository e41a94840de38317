"""The one codec: MessagePack for frames and control messages, built once.

Every failure (bad bytes, wrong shape, unknown tag, wrong type) becomes one `ProtocolError`,
so a receiving loop needs exactly one `except` to log the sender and drop the frame.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from protocol.control import ControlReply, ControlRequest
from protocol.errors import ProtocolError
from protocol.events import AgentEvent
from protocol.messages import Message

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_message_decoder: msgspec.msgpack.Decoder[Message] = msgspec.msgpack.Decoder(Message)
_control_request_decoder: msgspec.msgpack.Decoder[ControlRequest] = msgspec.msgpack.Decoder(
    ControlRequest
)
_control_reply_decoder = msgspec.msgpack.Decoder(ControlReply)
_event_decoder = msgspec.msgpack.Decoder(AgentEvent)


def encode(obj: Any) -> bytes:
    """Encode any wire Struct (or JSON-like value) to MessagePack bytes."""
    try:
        return _encoder.encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode {type(obj).__name__}: {exc}") from None


def _decode(decoder: msgspec.msgpack.Decoder[T], data: bytes, what: str) -> T:
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError subclass
        raise ProtocolError(f"malformed {what} ({len(data)} bytes): {exc}") from None
    except (TypeError, ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"malformed {what} ({len(data)} bytes): {exc}") from None


def decode_message(data: bytes) -> Message:
    return _decode(_message_decoder, data, "frame")


def decode_control_request(data: bytes) -> ControlRequest:
    return _decode(_control_request_decoder, data, "control request")


def decode_control_reply(data: bytes) -> ControlReply:
    return _decode(_control_reply_decoder, data, "control reply")


def decode_event(data: bytes) -> AgentEvent:
    return _decode(_event_decoder, data, "event")


def to_builtins(obj: Any) -> Any:
    """Wire Struct -> plain JSON-able Python values (for JSON output and logs)."""
    return msgspec.to_builtins(obj)


def json_dumps(obj: Any) -> bytes:
    return msgspec.json.encode(obj)
