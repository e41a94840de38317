"""Who connects to a ROUTER socket, and which connections close without being served.

Both sockets refuse frames over a size limit (ZMQ_MAXMSGSIZE): libzmq reads the length first
and closes the connection without allocating the frame, so a 600 MB frame costs nothing. It
does so silently; this watcher is how the daemon hears of it. A socket monitor reports every
accepted and closed connection; on accept the peer's pid and uid are read with SO_PEERCRED
(ipc peers are local processes). A connection that closes and whose pid the owner never
served is logged as `peer_dropped`: a refused frame, or a peer that sent nothing. A refused
frame usually closes the connection before the accept is handled, so its pid is often unknown
(`pid: null`); the log line still says which socket and what the limit is.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path

import structlog
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

log = structlog.get_logger("goondan.peers")
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_LOG_FIRST = 10
_MAX_DEPTH = 4096
_STAT_MAX = 4096
"""More than a `/proc/<pid>/stat` line holds (52 numbers and a 15-byte command name)."""


def peer_pid(frame: zmq.Frame) -> int | None:
    """The sender's pid of a frame received over ipc (libzmq's `Peer-Address` property is
    `<host>:<uid>:<gid>:<pid>` there), or None."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return None
    head, _, pid = str(address).rpartition(":")
    return int(pid) if head and pid.isdigit() else None


def peer_uid(frame: zmq.Frame) -> int | None:
    """The sender's uid of a frame received over ipc (from `Peer-Address`, as `peer_pid`): who
    an operator's decision is recorded as (orchestrator/calls/auth.py)."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return None
    parts = str(address).split(":")
    return int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None


def descends_from(pid: int, ancestor: int, limit: int = _MAX_DEPTH) -> bool | None:
    """Whether `pid` is `ancestor` or one of its descendants (the parent chain in /proc); None
    when that cannot be told: `pid` is gone (a caller that exits right after sending must not
    pass for a stranger), or its chain is deeper than any real one (one built to end the walk
    early) or kept changing while it was read."""
    for _ in range(3):
        found = _walk(pid, ancestor, limit)
        if found is not None or not Path(f"/proc/{pid}").exists():
            return found
    return None  # an ancestor died under each walk: its children moved up, look again


def _walk(pid: int, ancestor: int, limit: int) -> bool | None:
    for _ in range(limit):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        stat = _proc_stat(pid)
        if stat is None:
            return None  # gone: the caller itself, or an ancestor that died while we walked
        # the command name (field 2) may hold spaces and parentheses: split after the last ')'
        pid = int(stat.rpartition(b")")[2].split()[1])
    return None


def _proc_stat(pid: int) -> bytes | None:
    """`/proc/<pid>/stat` as bytes, or None when the process is gone. Read with three system
    calls and no file object: every control request walks its caller's whole parent chain
    (~6 of these), and a text file object with its decoder cost more than the reads."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, _STAT_MAX)  # procfs gives the whole line in one read
    except OSError:
        return None
    finally:
        os.close(fd)


def _credentials(fd: int) -> tuple[int, int] | None:
    """(pid, uid) of the peer of connection `fd`, or None when it is already closed.

    The monitor reports the accept after the fact: by then the connection may be gone and
    its fd number reused by anything (a pipe, a file), so every failure here is "unknown",
    never an error that could take the watcher, and the socket it watches, down."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        sock = socket.socket(fileno=dup)  # ENOTSOCK when the number now names a pipe
    except OSError:
        os.close(dup)
        return None
    with sock:
        try:
            pid, uid, _gid = _CRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
            )
        except OSError:
            return None
    return pid, uid


class PeerWatch:
    """Log connections to `sock` that close unserved; `served(pid)` says whether the owner
    handled a frame of that process."""

    def __init__(
        self, sock: zmq.asyncio.Socket, label: str, limit: int, served: Callable[[int], bool]
    ) -> None:
        self._monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._label = label
        self._limit = limit
        self._served = served
        self._peers: dict[int, tuple[int, int] | None] = {}
        self.dropped = 0

    async def run(self) -> None:
        while True:
            try:
                event = parse_monitor_message(await self._monitor.recv_multipart())
            except zmq.ZMQError:
                return  # the watched socket closed its monitor
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._peers[fd] = _credentials(fd)
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self._on_closed(self._peers.pop(fd, None))

    def _on_closed(self, peer: tuple[int, int] | None) -> None:
        if peer is not None and self._served(peer[0]):
            return
        self.dropped += 1
        if self.dropped <= _LOG_FIRST or self.dropped % 1000 == 0:
            log.warning(
                "peer_dropped",
                socket=self._label,
                pid=peer[0] if peer else None,
                uid=peer[1] if peer else None,
                max_frame_bytes=self._limit,
                dropped=self.dropped,
                reason="closed before a frame was served: one over the size limit, or none",
            )

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._monitor.close(linger=0)
