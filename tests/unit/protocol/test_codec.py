"""Round trip of every frame type, and garbage in -> ProtocolError out, nothing else."""

from __future__ import annotations

import contextlib
import os
import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol.control import (
    CONTROL_REQUEST_TYPES,
    CallsDecide,
    CallsResolve,
    ControlReply,
    Ping,
    SendText,
    StreamAck,
)
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import ReplyTo, Source, SourceKind, TraceContext, new_event, response_to
from protocol.messages import (
    MESSAGE_TYPES,
    Call,
    CallOp,
    CallPayload,
    CallResult,
    CallResultPayload,
    ChildState,
    Delta,
    Event,
    Heartbeat,
    HeartbeatPayload,
    Hello,
    HelloPayload,
    History,
    HistoryPayload,
    Message,
    Ready,
    ReadyPayload,
    Shutdown,
    ShutdownAck,
    ShutdownAckPayload,
    ShutdownPayload,
    ShutdownReason,
    StartError,
    StartErrorPayload,
    Status,
    StatusPayload,
    TurnOutcome,
)
from protocol.stream import DeltaKind, StreamDelta

SRC = Source(kind=SourceKind.AGENT, name="coordinator", instance_key="k1")
EVENT = new_event(
    type="agent.request",
    input="hi",
    instance_key="k1",
    source=SRC,
    reply_to=ReplyTo(target="agent:coordinator:k1", correlation_id="c1"),
    metadata={"x": [1, 2, {"y": None}]},
    auth={"user": "u1"},
)
FR = {"from_": "agent:worker:k1:3", "to": "orchestrator"}

SAMPLES: list[Message] = [
    Hello(
        **FR,
        payload=HelloPayload(pid=1, kind="agent", name="worker", instance_key="k1", generation=3),
    ),
    Ready(**FR, payload=ReadyPayload(pid=1, tools=["bash__exec"])),
    StartError(**FR, payload=StartErrorPayload(error=ErrorInfo(code="E_EXT_LOAD", message="x"))),
    Event(**FR, payload=EVENT),
    Status(
        **FR,
        payload=StatusPayload(state=ChildState.IDLE, turn_id="t", last_turn=TurnOutcome.COMPLETED),
    ),
    Call(**FR, payload=CallPayload(call_id="1", op=CallOp.SPAWN, args={"target": "w"})),
    CallResult(**FR, payload=CallResultPayload(call_id="1", ok=True, result={"a": 1})),
    Heartbeat(**FR, payload=HeartbeatPayload(seq=7, sent_at=1.5)),
    Shutdown(**FR, payload=ShutdownPayload(grace_period_ms=5, reason=ShutdownReason.CONFIG_CHANGE)),
    ShutdownAck(**FR, payload=ShutdownAckPayload(undelivered_events=["e1"])),
    Delta(
        **FR,
        payload=StreamDelta(correlation_id="c1", seq=3, kind=DeltaKind.TEXT, step=1, text="par"),
    ),
    History(**FR, payload=HistoryPayload(line=b'{"type":"append"}\n')),
]


def test_samples_cover_every_message_type() -> None:
    assert {type(m) for m in SAMPLES} == set(MESSAGE_TYPES)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: Message) -> None:
    assert codec.decode_message(codec.encode(msg)) == msg


def test_from_travels_as_from_and_type_tag_is_set() -> None:
    raw = msgspec.msgpack.decode(codec.encode(SAMPLES[0]))
    assert raw["type"] == "hello"
    assert raw["from"] == "agent:worker:k1:3"
    assert raw["payload"]["protocolVersion"] == 2
    assert "from_" not in raw


def test_unknown_fields_are_tolerated() -> None:
    raw = msgspec.msgpack.decode(codec.encode(SAMPLES[3]))
    raw["newTopLevel"] = 1
    raw["payload"]["someFutureField"] = {"a": 1}
    decoded = codec.decode_message(msgspec.msgpack.encode(raw))
    assert decoded == SAMPLES[3]


def test_response_carries_in_reply_to_and_trace() -> None:
    resp = response_to(EVENT, source=SRC, text="done")
    assert resp.in_reply_to == "c1"
    assert resp.trace == EVENT.trace
    assert resp.auth == EVENT.auth


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xc1",
        msgspec.msgpack.encode({"type": "nope", "from": "a", "to": "b", "payload": {}}),
        msgspec.msgpack.encode({"type": "hello", "from": "a", "to": "b"}),
        msgspec.msgpack.encode({"type": "heartbeat", "from": 1, "to": "b", "payload": {"seq": 1}}),
        msgspec.msgpack.encode([1, 2, 3]),
        msgspec.msgpack.encode("hello"),
        b"\x92" * 10_000,
    ],
)
def test_garbage_raises_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        codec.decode_message(data)
    assert info.value.code is ErrorCode.E_PROTOCOL_DECODE


def test_random_bytes_only_raise_protocol_error() -> None:
    rng = random.Random(1234)
    valid = [codec.encode(m) for m in SAMPLES]
    for i in range(3000):
        if i % 2:
            data = os.urandom(rng.randrange(0, 300))
        else:
            base = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 6)):
                base[rng.randrange(len(base))] = rng.randrange(256)
            data = bytes(base)
        with contextlib.suppress(ProtocolError):
            codec.decode_message(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_hypothesis_garbage(data: bytes) -> None:
    for decode in (codec.decode_message, codec.decode_control_request, codec.decode_event):
        with contextlib.suppress(ProtocolError):
            decode(data)


def test_control_round_trip() -> None:
    samples = [
        Ping(request_id="1"),
        SendText(request_id="2", text="hi", agent="a", instance_key="k"),
        CallsResolve(request_id="3", call_id="c", error_code=-32001, error_message="denied"),
        SendText(request_id="4", text="hi", stream=True),
        StreamAck(request_id="4", received=32),
    ]
    for req in samples:
        assert codec.decode_control_request(codec.encode(req)) == req
    assert len(CONTROL_REQUEST_TYPES) >= 10
    reply = ControlReply(request_id="1", ok=False, error=ErrorInfo(code="E", message="m"))
    assert codec.decode_control_reply(codec.encode(reply)) == reply
    tool = StreamDelta(correlation_id="c", seq=0, kind=DeltaKind.TOOL_FINISHED, tool="t__x",
                       tool_call_id="call_1", status="ok")  # fmt: skip
    interim = ControlReply(request_id="4", ok=True, delta=tool)
    decoded = codec.decode_control_reply(codec.encode(interim))
    assert decoded == interim and decoded.interim and not reply.interim


def test_a_stream_flag_costs_nothing_on_the_wire_when_unset() -> None:
    """Events of clients that do not stream encode as before the flag existed."""
    plain = msgspec.msgpack.decode(codec.encode(EVENT))
    assert plain["replyTo"] == {"target": "agent:coordinator:k1", "correlationId": "c1"}
    streamed = msgspec.structs.replace(EVENT, reply_to=ReplyTo(target="t", correlation_id="c",
                                                               stream=True))  # fmt: skip
    assert codec.decode_event(codec.encode(streamed)).reply_to == streamed.reply_to


def test_trace_child_keeps_trace_id() -> None:
    root = TraceContext.root()
    child = root.child()
    assert child.trace_id == root.trace_id
    assert child.parent_span_id == root.span_id
    assert child.span_id != root.span_id


def test_calls_decide_says_where_a_person_decided_from_a_closed_set() -> None:
    studio = CallsDecide(request_id="r", call_id="c", approve=True, via="studio")
    assert codec.decode_control_request(codec.encode(studio)) == studio
    assert CallsDecide(request_id="r", call_id="c", approve=True).via == "cli"  # older clients
    fields = msgspec.msgpack.decode(codec.encode(studio))
    forged = codec.encode({**fields, "via": "connector:tg"})
    with pytest.raises(ProtocolError):
        codec.decode_control_request(forged)
