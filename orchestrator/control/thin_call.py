"""`client.call` over the standard library alone: the same request/reply exchange with the
daemon's control ROUTER (token, deadline, interim notices, streamed deltas and their acks, the
announced event id, the final reply), spoken through `zmtp.ZmtpDealer` and `msgpack_thin` on
plain dicts shaped as msgspec encodes the control Structs (camelCase field names, defaults
omitted, requests tagged by `type`). A CLI command that imports only this can start without
pyzmq and msgspec (docs/performance.md, "The command line").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from orchestrator.control.zmtp import E_PROTOCOL_DECODE, ZmtpDealer, ZmtpError
from protocol import msgpack_thin

CONTROL_MAX_FRAME_BYTES = 4 << 20
"""`orchestrator.control.server.CONTROL_MAX_FRAME_BYTES` (which imports pyzmq; a test checks
that they are equal): a reply frame announced bigger is refused before it is read."""
ACK_EVERY = 32
"""`client.ACK_EVERY` (STREAM_WINDOW // 2; a test checks that they are equal)."""

Reply = dict[str, Any]


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
    deadline = time.monotonic() + timeout
    dealer = ZmtpDealer.connect(endpoint.removeprefix("ipc://"), deadline, CONTROL_MAX_FRAME_BYTES)
    try:
        dealer.send(msgpack_thin.encode({**request, "token": token}), deadline)
        received = 0
        while True:
            reply = _decode_reply(dealer.recv(deadline))
            if reply.get("delta") is not None:
                received += 1
                if received % ACK_EVERY == 0:
                    ack = {"type": "stream_ack", "requestId": request["requestId"],
                           "token": token, "received": received}  # fmt: skip
                    dealer.send(msgpack_thin.encode(ack), deadline)
                if on_delta is not None:
                    on_delta(reply["delta"])
            elif reply.get("notice") is not None:
                sys.stderr.write(f"goondan: {reply['notice']}\n")
                sys.stderr.flush()
            elif reply.get("accepted") is not None:
                if on_accepted is not None:
                    on_accepted(reply["accepted"])
            else:
                return reply
    finally:
        dealer.close()


def _decode_reply(data: bytes) -> Reply:
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
    return reply
