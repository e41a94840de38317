"""The CLI side of the control socket: find the running daemon, send one request.

The daemon is found through `<state_root>/run/<swarm>/active.json` (and `--swarm` when
several run); a pid that no longer exists means no daemon, whatever the files say.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import zmq

from orchestrator.control import runpointer
from orchestrator.control.rundir import read_active, read_token
from protocol.control import (
    STREAM_WINDOW,
    ControlReply,
    ControlRequest,
    OrchestratorInfo,
    StreamAck,
)
from protocol.control_codec import decode_control_reply, encode
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.pids import pid_alive
from protocol.stream import StreamDelta

ACK_EVERY = STREAM_WINDOW // 2
"""A streaming client acknowledges its deltas this often: the daemon never waits on it."""


class ClientError(Exception):
    def __init__(self, code: ErrorCode, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.error = ErrorInfo(code=code, message=message, suggestion=suggestion)


def layout_of(args: argparse.Namespace) -> StateLayout:
    root = getattr(args, "state_root", None)
    return StateLayout.from_env(Path(root) if root else None)


def _running(layout: StateLayout) -> list[OrchestratorInfo]:
    # the usual run dirs, plus those a daemon under systemd (RUNTIME_DIRECTORY) points to
    roots = dict.fromkeys((layout.run_paths("x").run_dir.parent, layout.root / "run"))
    found = []
    for active in dict.fromkeys(f for root in roots for f in runpointer.active_files(root)):
        info = read_active(active)
        if info is not None and pid_alive(info.pid):
            found.append(info)
    return found


def swarms_here(directory: Path | None = None) -> list[str]:
    """The swarms of the bundle in `directory` (default: the working directory), read from its
    goondan.yaml alone (a quick look, not a load: a broken bundle just names none)."""
    main = (directory or Path.cwd()) / "goondan.yaml"
    try:
        text = main.read_text(encoding="utf-8")
    except OSError:
        return []
    names = []
    for doc in text.split("\n---"):
        if re.search(r"^kind:\s*Swarm\s*$", doc, re.MULTILINE):
            found = re.search(r"^metadata:\s*(?:\{\s*name:\s*([\w.-]+)|\n\s+name:\s*([\w.-]+))",
                              doc, re.MULTILINE)  # fmt: skip
            if found:
                names.append(found.group(1) or found.group(2))
    return names


def pick_swarm(args: argparse.Namespace, known: list[str]) -> str | None:
    """The swarm a command acts on without a daemon: --swarm, else the bundle's here, else the
    only one `known`; None when that is ambiguous."""
    chosen: str | None = getattr(args, "swarm", None)
    if chosen:
        return chosen
    here = [s for s in swarms_here() if s in known] or swarms_here()
    if len(here) == 1:
        return here[0]
    return known[0] if len(known) == 1 else None


def find_daemons(args: argparse.Namespace) -> list[OrchestratorInfo]:
    """The daemons a command means: the --swarm one, else inside a bundle directory that
    bundle's, else every running one (at least one, or ClientError)."""
    layout = layout_of(args)
    swarm = getattr(args, "swarm", None)
    if swarm:
        info = read_active(layout.run_paths(swarm).active_json)
        if info is None or not pid_alive(info.pid):
            pointed = runpointer.read(runpointer.pointer_path(layout, swarm))
            info = read_active(pointed) if pointed is not None else None
        if info is None or not pid_alive(info.pid):
            raise ClientError(
                ErrorCode.E_DAEMON_NOT_RUNNING,
                f"no goondan daemon runs swarm {swarm!r} under {layout.root}",
                "start it with `goondan run`, or pass the right --state-root",
            )
        return [info]
    running = _running(layout)
    here = swarms_here()
    if len(running) > 1 and here:  # inside a bundle directory: that bundle's swarm
        running = [i for i in running if i.swarm in here] or running
    if not running:
        raise ClientError(
            ErrorCode.E_DAEMON_NOT_RUNNING,
            f"no goondan daemon is running under {layout.root}",
            "start one with `goondan run BUNDLE`, or pass --state-root / --swarm",
        )
    return sorted(running, key=lambda i: i.swarm)


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
    """The one daemon a command acts on (ClientError when several could be meant)."""
    running = find_daemons(args)
    if len(running) > 1:
        names = ", ".join(i.swarm for i in running)
        raise ClientError(
            ErrorCode.E_CONTROL_BAD_REQUEST,
            f"several daemons run under {layout_of(args).root}: {names}",
            "choose one with --swarm S",
        )
    return running[0]


def new_request_id() -> str:
    return uuid.uuid4().hex


def call(
    info: OrchestratorInfo,
    req: ControlRequest,
    timeout: float = 10.0,
    on_delta: Callable[[StreamDelta], None] | None = None,
    on_accepted: Callable[[str], None] | None = None,
) -> ControlReply:
    """One request, one final reply (blocking pyzmq: the CLI has no event loop). Interim
    notices (why a send waits) go to stderr at once; the deltas of a streaming send go to
    `on_delta` as they arrive, and are acknowledged; an announced event id to `on_accepted`."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    deadline = time.monotonic() + timeout
    try:
        endpoint = info.endpoints["control"]
        sock.connect(endpoint)
        token = read_token(endpoint)
        sock.send(encode(msgspec.structs.replace(req, token=token)))
        received = 0
        while True:
            left = max(0.0, deadline - time.monotonic())
            if not sock.poll(int(left * 1000)):
                raise ClientError(
                    ErrorCode.E_CONTROL_TIMEOUT,
                    f"the daemon (pid {info.pid}) did not answer within {timeout:g} s",
                )
            reply = decode_control_reply(sock.recv())
            if reply.delta is not None:
                received += 1
                if received % ACK_EVERY == 0:
                    ack = StreamAck(request_id=req.request_id, token=token, received=received)
                    sock.send(encode(ack))
                if on_delta is not None:
                    on_delta(reply.delta)
            elif reply.notice is not None:
                sys.stderr.write(f"goondan: {reply.notice}\n")
                sys.stderr.flush()
            elif reply.accepted is not None:
                if on_accepted is not None:
                    on_accepted(reply.accepted)
            else:
                return reply
    except ProtocolError as exc:
        raise ClientError(ErrorCode.E_PROTOCOL_DECODE, exc.message) from None
    finally:
        sock.close()
        ctx.term()


@dataclass(frozen=True, slots=True)
class Printer:
    command: str

    def error(self, error: ErrorInfo) -> None:
        hint = f" ({error.suggestion})" if error.suggestion else ""
        sys.stderr.write(f"goondan {self.command}: {error.code} {error.message}{hint}\n")

    def reply_error(self, reply: ControlReply) -> None:
        self.error(reply.error or ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST, message="failed"))


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
