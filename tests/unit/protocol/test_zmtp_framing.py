"""ZMTP framing (`protocol.zmtp`): a stream read in any pieces gives the same frames, and every
violation is a coded ZmtpError that keeps the frames before it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import zmtp

LIMIT = 1 << 16

frames = st.lists(st.tuples(st.sampled_from([0, zmtp.MORE]), st.binary(max_size=600)), max_size=12)


def _stream(items: list[tuple[int, bytes]]) -> bytes:
    return zmtp.GREETING + b"".join(zmtp.frame(body, flags) for flags, body in items)


@given(frames, st.lists(st.integers(min_value=0, max_value=8000), max_size=20))
def test_any_split_of_a_stream_reads_the_same_frames(
    items: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    stream = _stream(items)
    reader = zmtp.FrameReader(LIMIT)
    got: list[tuple[int, bytes]] = []
    start = 0
    for cut in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        got += reader.feed(stream[start:cut])
        start = cut
    assert reader.error is None
    assert got == [(flags | (zmtp.LONG if len(body) > 255 else 0), body) for flags, body in items]


def test_the_ready_command_carries_the_type_and_identity() -> None:
    [(flags, body)] = zmtp.FrameReader(LIMIT).feed(zmtp.GREETING + zmtp.ready(b"DEALER", b"id"))
    zmtp.check_ready(flags, body, b"DEALER")
    assert zmtp.properties(body[6:]) == {b"Socket-Type": b"DEALER", b"Identity": b"id"}
    assert zmtp.properties(zmtp.ready(b"DEALER")[8:]) == {b"Socket-Type": b"DEALER"}


def test_a_ping_is_answered_with_a_pong_carrying_its_context() -> None:
    assert zmtp.answer(zmtp.command(b"PING", b"\x00\x0actx")[2:]) == zmtp.command(b"PONG", b"ctx")
    assert zmtp.answer(zmtp.command(b"SUBSCRIBE", b"x")[2:]) is None


BAD = {
    "not a signature": (b"\x00" * 64, "not a ZMTP signature"),
    "zmtp 2": (zmtp.GREETING[:10] + b"\x02" + zmtp.GREETING[11:], "not 3.x"),
    "curve": (zmtp.GREETING[:12] + b"CURVE".ljust(20, b"\x00") + zmtp.GREETING[32:], "NULL"),
    "reserved flag bits": (zmtp.GREETING + b"\x08\x00", "reserved"),
    "over the limit": (zmtp.GREETING + b"\x02" + (LIMIT + 1).to_bytes(8, "big"), "at most"),
    "2^64-1 announced": (zmtp.GREETING + b"\x02" + b"\xff" * 8, "at most"),
}


@pytest.mark.parametrize(("stream", "why"), BAD.values(), ids=BAD.keys())
def test_a_violation_is_coded_and_keeps_the_frames_before_it(stream: bytes, why: str) -> None:
    reader = zmtp.FrameReader(LIMIT)
    good = zmtp.frame(b"before") if stream.startswith(zmtp.GREETING) else b""
    head, tail = stream[:64], stream[64:]
    got = reader.feed(head + good + tail)
    assert got == ([(0, b"before")] if good else [])
    assert reader.error is not None and reader.error.code == zmtp.E_PROTOCOL_DECODE
    assert why in reader.error.message
    assert reader.feed(zmtp.frame(b"after")) == []  # nothing more once broken


@pytest.mark.parametrize(
    "command",
    [b"", b"\x09PI", zmtp.command(b"PING", b"")[2:], zmtp.command(b"ERROR", b"\x03bad")[2:]],
    ids=["empty", "truncated name", "ping without ttl", "error"],
)
def test_a_malformed_or_error_command_is_coded(command: bytes) -> None:
    with pytest.raises(zmtp.ZmtpError) as caught:
        zmtp.answer(command)
    assert caught.value.code == zmtp.E_PROTOCOL_DECODE


@pytest.mark.parametrize(
    "body",
    [b"\x0bSocket-Type\x00\x00", b"\x0bSocket-Type\x00\x00\x00\x09ROUTER", b"\x30x"],
    ids=["truncated size", "value past the end", "name past the end"],
)
def test_a_malformed_ready_property_is_coded(body: bytes) -> None:
    with pytest.raises(zmtp.ZmtpError) as caught:
        zmtp.properties(body)
    assert caught.value.code == zmtp.E_PROTOCOL_DECODE
