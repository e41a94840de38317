"""The CLI side of the control socket, typed: the daemon a command means as an
`OrchestratorInfo`, one request as a control Struct and its reply as a `ControlReply`.

Finding the daemon and reporting errors are `orchestrator.control.locate`'s (re-exported
here); the exchange is `thin_call.converse` over the standard library's AF_UNIX socket, its
frames decoded by msgspec (a big reply, a log query's thousands of lines, decodes ~15x faster
than the thin codec). `goondan send` uses `locate` and `thin_call.call` alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import msgspec

from orchestrator.control import locate, thin_call
from orchestrator.control.locate import ClientError as ClientError
from orchestrator.control.locate import Printer as Printer
from orchestrator.control.locate import layout_of as layout_of
from orchestrator.control.locate import new_request_id as new_request_id
from orchestrator.control.locate import pick_swarm as pick_swarm
from orchestrator.control.locate import read_token
from orchestrator.control.locate import swarms_here as swarms_here
from orchestrator.control.zmtp import ZmtpError
from protocol.control import ControlReply, ControlRequest, OrchestratorInfo
from protocol.control_codec import decode_control_reply, encode
from protocol.errors import ErrorCode, ProtocolError
from protocol.stream import StreamDelta


def find_daemons(args: argparse.Namespace) -> list[OrchestratorInfo]:
    """`locate.find_daemons`, each as an OrchestratorInfo."""
    return [msgspec.convert(info, OrchestratorInfo) for info in locate.find_daemons(args)]


def cluster_node(args: argparse.Namespace, swarm: str | None = None) -> OrchestratorInfo | None:
    """The running cluster node a command means (of `swarm` when given), which sees the whole
    swarm where the files here hold only what this node ran; None on one machine, without a
    daemon, or when several could be meant."""
    try:
        info = find_daemon(args)
    except ClientError:
        return None
    return info if info.node and swarm in (None, info.swarm) else None


def find_daemon(args: argparse.Namespace) -> OrchestratorInfo:
    """`locate.find_daemon` as an OrchestratorInfo."""
    return msgspec.convert(locate.find_daemon(args), OrchestratorInfo)


def call(
    info: OrchestratorInfo,
    req: ControlRequest,
    timeout: float = 10.0,
    on_delta: Callable[[StreamDelta], None] | None = None,
    on_accepted: Callable[[str], None] | None = None,
) -> ControlReply:
    """One request, one final reply (blocking: the CLI has no event loop). Interim notices
    (why a send waits) go to stderr at once; the deltas of a streaming send go to `on_delta`
    as they arrive, and are acknowledged; an announced event id to `on_accepted`."""
    active = msgspec.to_builtins(info)
    endpoint = locate.control_endpoint(active)
    token = read_token(endpoint)
    try:
        return thin_call.converse(
            endpoint, req.request_id, token, encode(msgspec.structs.replace(req, token=token)),
            timeout, _decoded, on_delta, on_accepted,
        )  # fmt: skip
    except ZmtpError as exc:
        raise locate.call_failed(exc, active, timeout) from None
    except ProtocolError as exc:
        raise ClientError(ErrorCode.E_PROTOCOL_DECODE, exc.message) from None


def _decoded(data: bytes) -> thin_call.Decoded[ControlReply]:
    reply = decode_control_reply(data)
    return reply, reply.delta, reply.notice, reply.accepted


def ask(
    args: argparse.Namespace,
    req: ControlRequest,
    printer: Printer,
    timeout: float,
    info: OrchestratorInfo | None = None,
) -> tuple[OrchestratorInfo, ControlReply] | None:
    """The daemon `args` pick (or `info`) and its successful reply to `req`; None when there
    is no such daemon, it did not answer, or it refused (each printed: the command exits
    EXIT_RUNTIME)."""
    try:
        info = info or find_daemon(args)
        reply = call(info, req, timeout=timeout)
    except ClientError as exc:
        printer.error(exc.error)
        return None
    if not reply.ok:
        printer.reply_error(reply)
        return None
    return info, reply


def result_of(reply: ControlReply) -> Any:
    return reply.result
