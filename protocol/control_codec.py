"""The codec's half a control client needs: `encode` and the control reply's decoder, without
the frame and event types (`goondan send` imports this module, and `protocol.codec` builds its
frame decoders over the types of every message). `protocol.codec` re-exports every name here:
there is one codec, and every failure is one `ProtocolError`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from protocol.control import ControlReply
from protocol.errors import ProtocolError

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_control_reply_decoder = msgspec.msgpack.Decoder(ControlReply)


def encode(obj: Any) -> bytes:
    """Encode any wire Struct (or JSON-like value) to MessagePack bytes."""
    try:
        return _encoder.encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode {type(obj).__name__}: {exc}") from None


def decode_with(decoder: msgspec.msgpack.Decoder[T], data: bytes, what: str) -> T:
    """`data` decoded by `decoder`; any failure is a ProtocolError naming `what` and its size."""
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError subclass
        raise ProtocolError(f"malformed {what} ({len(data)} bytes): {exc}") from None
    except (TypeError, ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"malformed {what} ({len(data)} bytes): {exc}") from None


def decode_control_reply(data: bytes) -> ControlReply:
    return decode_with(_control_reply_decoder, data, "control reply")
