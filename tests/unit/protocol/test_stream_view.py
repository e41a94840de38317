"""A delta read without msgspec (protocol/stream_view.py) is the delta msgspec reads: the same
fields from the same map, and the same maps refused."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.stream import StreamDelta
from protocol.stream_view import DeltaKind, PlainDelta, delta_line

GOOD = [
    StreamDelta(correlation_id="c", seq=0, kind=DeltaKind.TEXT, step=1, text="hel"),
    StreamDelta(
        correlation_id="c",
        seq=7,
        kind=DeltaKind.TOOL_STARTED,
        step=2,
        tool="bash",
        tool_call_id="t1",
    ),
    StreamDelta(
        correlation_id="c",
        seq=8,
        kind=DeltaKind.TOOL_FINISHED,
        tool="bash",
        tool_call_id="t1",
        status="error",
    ),
]


@pytest.mark.parametrize("delta", GOOD)
def test_a_wire_delta_reads_as_msgspec_reads_it(delta: StreamDelta) -> None:
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(delta))  # the map, defaults left out
    plain = PlainDelta.from_wire(wire)
    assert {f: getattr(plain, f) for f in delta.__struct_fields__} == msgspec.structs.asdict(delta)
    assert delta_line(plain) == delta.event()


BAD: list[dict[str, Any]] = [
    {"seq": 0, "kind": "text"},  # no correlationId
    {"correlationId": "c", "kind": "text"},  # no seq
    {"correlationId": "c", "seq": True, "kind": "text"},
    {"correlationId": "c", "seq": "0", "kind": "text"},
    {"correlationId": "c", "seq": 0, "kind": "shout"},
    {"correlationId": "c", "seq": 0, "kind": "text", "text": 5},
    {"correlationId": "c", "seq": 0, "kind": "text", "step": 1.5},
    {"correlationId": "c", "seq": 0, "kind": "tool_started", "tool": ["bash"]},
]


@pytest.mark.parametrize("wire", BAD)
def test_a_map_msgspec_refuses_is_refused(wire: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(wire, StreamDelta)
    with pytest.raises(ValueError):
        PlainDelta.from_wire(wire)
