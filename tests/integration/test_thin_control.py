"""The msgspec-free control call (`orchestrator.control.thin_call`) against the real daemon:
its ROUTER sees an ordinary DEALER, the fence reads the token, a streaming send's deltas and
final reply arrive as msgspec's own shapes."""

from __future__ import annotations

import asyncio

import msgspec

from orchestrator.control import thin_call
from orchestrator.control.locate import read_token
from protocol.control import ControlReply, Ping, SendText
from protocol.errors import ErrorCode
from protocol.stream import StreamDelta
from tests.integration.conftest import StartDaemon
from tests.integration.test_streaming import FIXTURE, info_of


async def test_a_streaming_send_and_a_refused_token_through_the_thin_call(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        daemon = await start_daemon(FIXTURE, swarm="stream")
        endpoint = info_of(daemon).endpoints["control"]
        token = read_token(endpoint)
        req = msgspec.to_builtins(SendText(request_id="t1", text="hello thin", stream=True,
                                           announce=True, timeout_ms=60_000))  # fmt: skip
        deltas: list[StreamDelta] = []
        accepted: list[str] = []
        final = await asyncio.to_thread(
            thin_call.call, endpoint, token, req, 60,
            lambda d: deltas.append(msgspec.convert(d, StreamDelta)), accepted.append,
        )  # fmt: skip
        reply = msgspec.convert(final, ControlReply)
        assert reply.ok and reply.request_id == "t1", reply.error
        assert reply.result["type"] == "agent.response"
        assert reply.result["input"] == "echo: hello thin"
        assert [d.seq for d in deltas] == list(range(len(deltas))) and len(deltas) > 1
        assert "".join(d.text for d in deltas) == "echo: hello thin"
        assert len(accepted) == 1 and len(accepted[0]) == 32  # the input's event id

        ping = msgspec.to_builtins(Ping(request_id="t2"))
        refused = await asyncio.to_thread(thin_call.call, endpoint, "not-the-token", ping, 30)
        error = msgspec.convert(refused, ControlReply).error
        assert error is not None and error.code == ErrorCode.E_CONTROL_FORBIDDEN
