"""The msgspec-free control call against a real ZeroMQ ROUTER playing the daemon: interim
notices, the announced event id, deltas acknowledged every ACK_EVERY, the final reply; a
malformed reply and a silent daemon are coded errors. Replies are encoded by msgspec from the
real ControlReply, requests decoded by msgspec into the real request types."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

import msgspec
import pytest
import zmq

from orchestrator.control import client, server, thin_call
from orchestrator.control.zmtp import E_CONTROL_TIMEOUT, E_PROTOCOL_DECODE, ZmtpError
from protocol.control import (
    STREAM_WINDOW,
    ControlReply,
    ControlRequest,
    OrchestratorInfo,
    Ping,
    SendText,
    StreamAck,
)
from protocol.stream import DeltaKind, StreamDelta


def test_its_bounds_are_the_daemons() -> None:
    assert thin_call.CONTROL_MAX_FRAME_BYTES == server.CONTROL_MAX_FRAME_BYTES
    assert thin_call.ACK_EVERY == STREAM_WINDOW // 2


@pytest.fixture
def endpoint() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="thin-", dir="/tmp")  # AF_UNIX paths are short
    yield f"ipc://{path}/control.sock"
    shutil.rmtree(path, ignore_errors=True)


Script = Callable[[zmq.Socket[bytes], bytes, ControlRequest], list[ControlRequest]]


def serve(endpoint: str, script: Script) -> tuple[threading.Thread, list[ControlRequest]]:
    """A ROUTER at `endpoint` that runs `script` on the first request; what it heard after."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.RCVTIMEO, 10_000)
    router.bind(endpoint)
    heard: list[ControlRequest] = []

    def run() -> None:
        try:
            peer, data = router.recv_multipart()
            first = msgspec.msgpack.decode(data, type=ControlRequest)
            heard.append(first)
            heard.extend(script(router, peer, first))
        finally:
            router.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, heard


def reply(router: zmq.Socket[bytes], peer: bytes, **fields: object) -> None:
    router.send_multipart([peer, msgspec.msgpack.encode(ControlReply(**fields))])  # type: ignore[arg-type]


def streaming(router: zmq.Socket[bytes], peer: bytes, req: ControlRequest) -> list[ControlRequest]:
    rid = req.request_id
    reply(router, peer, request_id=rid, ok=True, notice="waiting for the agent")
    reply(router, peer, request_id=rid, ok=True, accepted="evt-1")
    for seq in range(70):
        delta = StreamDelta(correlation_id=rid, seq=seq, kind=DeltaKind.TEXT, text=f"{seq} ")
        reply(router, peer, request_id=rid, ok=True, delta=delta)
    acks = [
        msgspec.msgpack.decode(router.recv_multipart()[1], type=ControlRequest) for _ in range(2)
    ]
    reply(router, peer, request_id=rid, ok=True, result={"type": "agent.response", "n": 70})
    return acks


def test_a_streaming_send_through_the_thin_call(
    endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    thread, heard = serve(endpoint, streaming)
    req = msgspec.to_builtins(SendText(request_id="r1", text="hi", stream=True, announce=True))
    deltas: list[StreamDelta] = []
    accepted: list[str] = []
    final = thin_call.call(endpoint, "tok", req, 10,
                           lambda d: deltas.append(msgspec.convert(d, StreamDelta)),
                           accepted.append)  # fmt: skip
    thread.join(timeout=10)
    assert msgspec.convert(final, ControlReply) == ControlReply(
        request_id="r1", ok=True, result={"type": "agent.response", "n": 70}
    )
    assert [d.seq for d in deltas] == list(range(70)) and accepted == ["evt-1"]
    assert heard == [
        SendText(request_id="r1", token="tok", text="hi", stream=True, announce=True),
        StreamAck(request_id="r1", token="tok", received=32),
        StreamAck(request_id="r1", token="tok", received=64),
    ]
    assert "goondan: waiting for the agent" in capsys.readouterr().err


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not MessagePack
        msgspec.msgpack.encode([1, 2]),  # not a map
        msgspec.msgpack.encode({"requestId": "r1"}),  # no ok
        msgspec.msgpack.encode({"requestId": "r1", "ok": True, "delta": 3}),
    ],
)
def test_a_malformed_reply_is_a_decode_error(endpoint: str, payload: bytes) -> None:
    def garbage(
        router: zmq.Socket[bytes], peer: bytes, req: ControlRequest
    ) -> list[ControlRequest]:
        router.send_multipart([peer, payload])
        return []

    thread, _ = serve(endpoint, garbage)
    with pytest.raises(ZmtpError) as caught:
        thin_call.call(endpoint, "", {"type": "ping", "requestId": "r1"}, 10)
    thread.join(timeout=10)
    assert caught.value.code == E_PROTOCOL_DECODE


def test_a_silent_daemon_is_a_timeout(endpoint: str) -> None:
    left = threading.Event()

    def silent(router: zmq.Socket[bytes], peer: bytes, req: ControlRequest) -> list[ControlRequest]:
        left.wait(10)  # the connection held open, never answered, until the client gave up
        return []

    thread, heard = serve(endpoint, silent)
    with pytest.raises(ZmtpError) as caught:
        thin_call.call(endpoint, "", {"type": "status", "requestId": "r2"}, 0.3)
    left.set()
    thread.join(timeout=10)
    assert caught.value.code == E_CONTROL_TIMEOUT
    assert [r.request_id for r in heard] == ["r2"]


def test_it_imports_neither_pyzmq_nor_msgspec() -> None:
    # the point of the module: a command using it starts without either (a fresh interpreter,
    # as the test process has both loaded)
    probe = "import sys, orchestrator.control.thin_call; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    loaded = {m.split(".")[0] for m in done.stdout.split()}
    assert "orchestrator" in loaded and not loaded & {"zmq", "msgspec", "typing_extensions"}


def _info(endpoint: str) -> OrchestratorInfo:
    return OrchestratorInfo(
        pid=os.getpid(), swarm="s", bundle="b.yaml", started_at="now", version="0",
        state_root="/tmp", endpoints={"control": endpoint},
    )  # fmt: skip


def test_the_typed_client_reads_the_same_exchange_with_msgspec(
    endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # every command but send: the same transport, its frames decoded into the control Structs
    thread, heard = serve(endpoint, streaming)
    deltas: list[StreamDelta] = []
    accepted: list[str] = []
    req = SendText(request_id="r1", text="hi", stream=True, announce=True)
    reply = client.call(_info(endpoint), req, 10, deltas.append, accepted.append)
    thread.join(timeout=10)
    assert reply == ControlReply(
        request_id="r1", ok=True, result={"type": "agent.response", "n": 70}
    )
    assert [d.seq for d in deltas] == list(range(70)) and accepted == ["evt-1"]
    assert all(isinstance(d, StreamDelta) for d in deltas)
    assert [type(r) for r in heard] == [SendText, StreamAck, StreamAck]
    assert "goondan: waiting for the agent" in capsys.readouterr().err


def test_the_typed_client_names_the_silent_daemon_and_refuses_garbage(endpoint: str) -> None:
    left = threading.Event()

    def silent(router: zmq.Socket[bytes], peer: bytes, req: ControlRequest) -> list[ControlRequest]:
        left.wait(10)
        return []

    thread, _ = serve(endpoint, silent)
    with pytest.raises(client.ClientError) as caught:
        client.call(_info(endpoint), Ping(request_id="r3"), 0.3)
    left.set()
    thread.join(timeout=10)
    assert caught.value.error.code == E_CONTROL_TIMEOUT
    assert f"pid {os.getpid()}" in caught.value.error.message

    def garbage(
        router: zmq.Socket[bytes], peer: bytes, req: ControlRequest
    ) -> list[ControlRequest]:
        router.send_multipart([peer, msgspec.msgpack.encode({"requestId": 7})])
        return []

    thread, _ = serve(endpoint, garbage)
    with pytest.raises(client.ClientError) as caught:
        client.call(_info(endpoint), Ping(request_id="r4"), 10)
    thread.join(timeout=10)
    assert caught.value.error.code == E_PROTOCOL_DECODE
