"""A minimal ZMTP 3.x DEALER over an AF_UNIX stream socket, on the standard library alone: the
CLI's thin control client speaks to the daemon's ROUTER (`ipc://PATH`) without importing pyzmq
(its import is most of `goondan send`'s start: docs/performance.md, "The command line").

What it does of ZMTP 3.0 (rfc.zeromq.org/spec/23; 3.1, spec 37, adds PING/PONG): the 64-byte
greeting with the NULL mechanism, a READY command naming Socket-Type DEALER, then messages of
one frame each way. A PING is answered with its PONG; any other command is skipped. The peer
is untrusted input: every length is bounded by `max_frame` before anything is read, every read
is bounded by the caller's deadline, and every failure is a `ZmtpError` with an ErrorCode's
value (E_PROTOCOL_DECODE for bytes that break the spec, E_CONTROL_TIMEOUT for a silent peer,
E_DAEMON_NOT_RUNNING for nobody at the path or a peer gone).

It opens its socket with `_socket`, the C module under the standard library's `socket`: the
dealer uses only the C socket's own methods (connect, sendall, recv, settimeout, close), and
importing socket.py (with selectors and math) was ~2.5 ms of a ~40 ms `goondan send`.
"""

from __future__ import annotations

import _socket
import struct
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

T = TypeVar("T")

E_PROTOCOL_DECODE = "E_PROTOCOL_DECODE"
E_CONTROL_TIMEOUT = "E_CONTROL_TIMEOUT"
E_DAEMON_NOT_RUNNING = "E_DAEMON_NOT_RUNNING"

_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04
_MECHANISM = b"NULL".ljust(20, b"\x00")
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + _MECHANISM + b"\x00" + b"\x00" * 31
"""Signature, version 3.0, NULL, as-server 0, filler: 64 bytes."""


class ZmtpError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _command(name: bytes, body: bytes) -> bytes:
    data = bytes((len(name),)) + name + body
    return _frame(data, _COMMAND)


def _frame(data: bytes, flags: int = 0) -> bytes:
    if len(data) <= 0xFF:
        return bytes((flags, len(data))) + data
    return bytes((flags | _LONG,)) + struct.pack(">Q", len(data)) + data


READY = _command(b"READY", b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER")


class ZmtpDealer:
    """One connection to a ROUTER; not thread-safe, blocking, each call under a deadline."""

    def __init__(self, sock: _socket.socket, max_frame: int) -> None:
        self.sock = sock
        self.max_frame = max_frame

    @classmethod
    def connect(cls, path: str, deadline: float, max_frame: int) -> ZmtpDealer:
        """Connected to the ROUTER at `path` (a filesystem path: `ipc://` stripped by the
        caller), its greeting and READY checked."""
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        dealer = cls(sock, max_frame)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                sock.connect(path)
            except TimeoutError:
                raise ZmtpError(E_CONTROL_TIMEOUT, f"connecting to {path} timed out") from None
            except OSError as exc:
                raise ZmtpError(
                    E_DAEMON_NOT_RUNNING, f"nobody listens at {path} ({exc.strerror})"
                ) from None
            dealer._send(GREETING + READY, deadline)
            dealer._check_greeting(dealer._read(64, deadline))
            dealer._check_ready(dealer._read_frame(deadline))
        except BaseException:
            sock.close()
            raise
        return dealer

    def close(self) -> None:
        self.sock.close()

    def send(self, payload: bytes, deadline: float) -> None:
        self._send(_frame(payload), deadline)

    def recv(self, deadline: float) -> bytes:
        """The next message: one frame (a ROUTER's reply to a DEALER carries no envelope)."""
        while True:
            flags, data = self._read_frame(deadline)
            if flags & _COMMAND:
                self._on_command(data, deadline)
                continue
            if flags & _MORE:
                raise ZmtpError(E_PROTOCOL_DECODE, "a control reply of more than one frame")
            return data

    def _on_command(self, data: bytes, deadline: float) -> None:
        name = _command_name(data)
        if name == b"PING":  # ZMTP 3.1 heartbeat: the PONG carries the PING's context back
            if len(data) < 7:
                raise ZmtpError(E_PROTOCOL_DECODE, "a PING command without its TTL")
            self._send(_command(b"PONG", data[7:]), deadline)
        elif name == b"ERROR":
            raise ZmtpError(E_PROTOCOL_DECODE, "the peer sent a ZMTP ERROR command")

    def _check_greeting(self, greeting: bytes) -> None:
        if greeting[0] != 0xFF or not greeting[9] & 0x01:
            raise ZmtpError(E_PROTOCOL_DECODE, "the peer's greeting is not a ZMTP signature")
        if greeting[10] < 3:
            raise ZmtpError(E_PROTOCOL_DECODE, f"the peer speaks ZMTP {greeting[10]}, not 3.x")
        if greeting[12:32] != _MECHANISM:
            raise ZmtpError(E_PROTOCOL_DECODE, "the peer's security mechanism is not NULL")

    def _check_ready(self, frame: tuple[int, bytes]) -> None:
        flags, data = frame
        if not flags & _COMMAND or _command_name(data) != b"READY":
            raise ZmtpError(E_PROTOCOL_DECODE, "the peer's first command is not READY")
        if _properties(data[6:]).get(b"Socket-Type") != b"ROUTER":
            raise ZmtpError(E_PROTOCOL_DECODE, "the peer is not a ROUTER socket")

    def _read_frame(self, deadline: float) -> tuple[int, bytes]:
        flags = self._read(1, deadline)[0]
        if flags & ~(_MORE | _LONG | _COMMAND):
            raise ZmtpError(E_PROTOCOL_DECODE, f"reserved frame flag bits set: 0x{flags:02x}")
        if flags & _LONG:
            size = struct.unpack(">Q", self._read(8, deadline))[0]
        else:
            size = self._read(1, deadline)[0]
        if size > self.max_frame:
            raise ZmtpError(
                E_PROTOCOL_DECODE, f"a frame of {size} bytes (at most {self.max_frame})"
            )
        return flags, self._read(size, deadline)

    def _read(self, n: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while n:
            chunk = self._io(deadline, partial(self.sock.recv, min(n, 1 << 20)))
            if not chunk:
                raise ZmtpError(E_DAEMON_NOT_RUNNING, "the daemon closed the control connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _send(self, data: bytes, deadline: float) -> None:
        self._io(deadline, partial(self.sock.sendall, data))

    def _io(self, deadline: float, op: Callable[[], T]) -> T:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ZmtpError(E_CONTROL_TIMEOUT, "the daemon did not answer in time")
        self.sock.settimeout(left)
        try:
            return op()
        except TimeoutError:
            raise ZmtpError(E_CONTROL_TIMEOUT, "the daemon did not answer in time") from None
        except OSError as exc:
            raise ZmtpError(
                E_DAEMON_NOT_RUNNING, f"the control connection failed ({exc.strerror})"
            ) from None


def _command_name(data: bytes) -> bytes:
    if not data or data[0] + 1 > len(data):
        raise ZmtpError(E_PROTOCOL_DECODE, "a truncated ZMTP command")
    return data[1 : 1 + data[0]]


def _properties(body: bytes) -> dict[bytes, bytes]:
    """READY's metadata: name (1-byte length), value (4-byte length), repeated."""
    found: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(body):
        name_end = pos + 1 + body[pos]
        if name_end + 4 > len(body):
            raise ZmtpError(E_PROTOCOL_DECODE, "a truncated READY property")
        size = struct.unpack(">I", body[name_end : name_end + 4])[0]
        if name_end + 4 + size > len(body):
            raise ZmtpError(E_PROTOCOL_DECODE, "a READY property longer than its command")
        found[body[pos + 1 : name_end]] = body[name_end + 4 : name_end + 4 + size]
        pos = name_end + 4 + size
    return found
