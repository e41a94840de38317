"""The CLI's control call over the standard library: the request/reply exchange with the
daemon's control ROUTER (token, deadline, interim notices, streamed deltas and their acks, the
announced event id, the final reply), spoken through `zmtp.ZmtpDealer`, so no CLI command
imports pyzmq.

`converse` is the exchange with the decoding left to its caller: `orchestrator.control.client`
decodes with msgspec into the control Structs (every command but `send`). `call` decodes with
`msgpack_thin` into plain dicts shaped as msgspec encodes those Structs (camelCase field
names, defaults omitted, requests tagged by `type`): `goondan send` imports neither pyzmq nor
msgspec (docs/performance.md, "The command line").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from orchestrator.control.zmtp import E_PROTOCOL_DECODE, ZmtpDealer, ZmtpError
from protocol import msgpack_thin

CONTROL_MAX_FRAME_BYTES = 4 << 20
"""`orchestrator.control.server.CONTROL_MAX_FRAME_BYTES` (which imports pyzmq; a test checks
that they are equal): a reply frame announced bigger is refused before it is read."""
ACK_EVERY = 32
"""`STREAM_WINDOW // 2` of protocol.control (which imports msgspec; a test checks that they
are equal): a streaming client acknowledges its deltas this often."""

Reply = dict[str, Any]
R = TypeVar("R")
Decoded = tuple[R, Any, str | None, str | None]
"""A frame as its decoder read it: the reply, and its delta, notice and announced event id
(each None when absent; a frame with none of the three is the final reply)."""


def call(
    endpoint: str,
    token: str,
    request: dict[str, Any],
    timeout: float,
    on_delta: Callable[[dict[str, Any]], None] | None = None,
    on_accepted: Callable[[str], None] | None = None,
) -> Reply:
    """One request (a dict with its `type` and `requestId`), its final reply as a dict; a
    `ZmtpError` with E_CONTROL_TIMEOUT past `timeout`, E_PROTOCOL_DECODE for a reply that is
    not a control reply, E_DAEMON_NOT_RUNNING when nobody answers at `endpoint`."""
    data = msgpack_thin.encode({**request, "token": token})
    return converse(endpoint, request["requestId"], token, data, timeout, _decode_reply,
                    on_delta, on_accepted)  # fmt: skip


def converse(
    endpoint: str,
    request_id: str,
    token: str,
    request: bytes,
    timeout: float,
    decode: Callable[[bytes], Decoded[R]],
    on_delta: Callable[[Any], None] | None = None,
    on_accepted: Callable[[str], None] | None = None,
) -> R:
    """Send `request` (encoded, its token in it) and read frames through `decode` until the
    final reply: notices go to stderr at once, deltas to `on_delta` (acknowledged every
    ACK_EVERY, so the daemon never waits on this client), the announced event id to
    `on_accepted`. Failures as `call`'s; `decode` raises ZmtpError for a frame it cannot
    read."""
    deadline = time.monotonic() + timeout
    dealer = ZmtpDealer.connect(endpoint.removeprefix("ipc://"), deadline, CONTROL_MAX_FRAME_BYTES)
    try:
        dealer.send(request, deadline)
        received = 0
        while True:
            reply, delta, notice, accepted = decode(dealer.recv(deadline))
            if delta is not None:
                received += 1
                if received % ACK_EVERY == 0:
                    ack = {"type": "stream_ack", "requestId": request_id, "token": token,
                           "received": received}  # fmt: skip
                    dealer.send(msgpack_thin.encode(ack), deadline)
                if on_delta is not None:
                    on_delta(delta)
            elif notice is not None:
                sys.stderr.write(f"goondan: {notice}\n")
                sys.stderr.flush()
            elif accepted is not None:
                if on_accepted is not None:
                    on_accepted(accepted)
            else:
                return reply
    finally:
        dealer.close()


def _decode_reply(data: bytes) -> Decoded[Reply]:
    try:
        reply = msgpack_thin.decode(data)
    except msgpack_thin.ThinDecodeError as exc:
        raise ZmtpError(
            E_PROTOCOL_DECODE, f"malformed control reply ({len(data)} bytes): {exc}"
        ) from None
    # the fields the loop reads, with their types: anything else is the caller's to check
    if not (
        isinstance(reply, dict)
        and isinstance(reply.get("requestId"), str)
        and isinstance(reply.get("ok"), bool)
        and isinstance(reply.get("delta"), dict | None)
        and isinstance(reply.get("notice"), str | None)
        and isinstance(reply.get("accepted"), str | None)
    ):
        raise ZmtpError(E_PROTOCOL_DECODE, f"malformed control reply ({len(data)} bytes)")
    return reply, reply.get("delta"), reply.get("notice"), reply.get("accepted")
