"""The thin MessagePack codec (the CLI's msgspec-free control client) against msgspec: the
same bytes for the same values, each decodes what the other encodes, and bad bytes are one
coded error, never a traceback of another type or a hang."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import msgpack_thin
from protocol.control import ControlReply, SendText, StreamAck
from protocol.errors import ErrorCode, ErrorInfo
from protocol.stream import DeltaKind, StreamDelta

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(), inner, max_size=20),
    max_leaves=60,
)


@settings(max_examples=150, deadline=None)
@given(values)
def test_the_same_bytes_as_msgspec_and_each_decodes_the_other(value: Any) -> None:
    thin = msgpack_thin.encode(value)
    assert thin == msgspec.msgpack.encode(value)
    assert msgspec.msgpack.decode(thin) == value
    assert msgpack_thin.decode(msgspec.msgpack.encode(value)) == value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ids = st.text(min_size=1, max_size=32)


@settings(max_examples=150, deadline=None)
@given(ids, st.text(), st.one_of(st.none(), ids), st.booleans(), st.integers(0, 2**31),
       st.dictionaries(st.text(max_size=8), json_values, max_size=3))  # fmt: skip
def test_control_requests_round_trip_through_both(
    rid: str, text: str, agent: str | None, stream: bool, timeout_ms: int, metadata: Any
) -> None:
    for req in (
        SendText(request_id=rid, token="t" * 43, text=text, agent=agent, stream=stream,
                 wait=True, timeout_ms=timeout_ms, metadata=metadata, announce=stream),
        StreamAck(request_id=rid, token="tok", received=timeout_ms),
    ):  # fmt: skip
        wire = msgspec.msgpack.encode(req)
        shape = msgpack_thin.decode(wire)
        assert msgpack_thin.encode(shape) == wire
        assert msgspec.msgpack.decode(msgpack_thin.encode(shape), type=type(req)) == req


@settings(max_examples=150, deadline=None)
@given(ids, st.booleans(), json_values, st.one_of(st.none(), st.text()),
       st.one_of(st.none(), st.integers(0, 2**20)), st.one_of(st.none(), ids))  # fmt: skip
def test_control_replies_round_trip_through_both(
    rid: str, ok: bool, result: Any, notice: str | None, seq: int | None, accepted: str | None
) -> None:
    delta = (
        None
        if seq is None
        else StreamDelta(correlation_id=rid, seq=seq, kind=DeltaKind.TEXT, text="x")
    )
    error = (
        None if ok else ErrorInfo(code=ErrorCode.E_CONTROL_TIMEOUT, message="m", suggestion=notice)
    )
    reply = ControlReply(request_id=rid, ok=ok, result=result, error=error, notice=notice,
                         delta=delta, accepted=accepted)  # fmt: skip
    wire = msgspec.msgpack.encode(reply)
    shape = msgpack_thin.decode(wire)
    assert shape == msgspec.to_builtins(reply)
    assert msgspec.msgpack.decode(msgpack_thin.encode(shape), type=ControlReply) == reply


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xc1",  # never used
        b"\xd4\x01\x00",  # fixext: no extension types on the control wire
        b"\xc7\x01\x05\x00",  # ext 8
        b"\xdb\xff\xff\xff\xff",  # a 4 GiB str announced in 5 bytes
        b"\xdd\xff\xff\xff\xff",  # 4 billion items announced
        b"\xdf\xff\xff\xff\xff",  # 4 billion pairs announced
        b"\xa5abc",  # truncated str
        b"\xcb\x00\x00",  # truncated float
        b"\xa2\xff\xfe",  # not UTF-8
        b"\x91" * 100_000 + b"\xc0",  # deep nesting
        b"\x81\x90\xc0",  # an array as a map key
        b"\xc0\xc0",  # trailing bytes
    ],
)
def test_garbage_is_one_coded_error(garbage: bytes) -> None:
    with pytest.raises(msgpack_thin.ThinDecodeError) as caught:
        msgpack_thin.decode(garbage)
    assert caught.value.code == ErrorCode.E_PROTOCOL_DECODE.value


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_fail_coded(data: bytes) -> None:
    # the only failure allowed: any other exception fails the test
    with contextlib.suppress(msgpack_thin.ThinDecodeError):
        msgpack_thin.decode(data)


def test_values_it_cannot_encode_are_refused() -> None:
    with pytest.raises(TypeError):
        msgpack_thin.encode(object())
    with pytest.raises(OverflowError):
        msgpack_thin.encode(2**64)
