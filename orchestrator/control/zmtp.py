"""A blocking ZMTP 3.x DEALER over an AF_UNIX stream socket, on the standard library alone: the
CLI's thin control client speaks to the daemon's ROUTER (`ipc://PATH`) without importing pyzmq
(its import is most of `goondan send`'s start: docs/performance.md, "The command line"). The
framing is `protocol.zmtp`'s; this module adds the socket, the deadlines and the codes.

Every read is bounded by the caller's deadline and every failure is a `ZmtpError` with an
ErrorCode's value (E_PROTOCOL_DECODE for bytes that break the spec, E_CONTROL_TIMEOUT for a
silent peer, E_DAEMON_NOT_RUNNING for nobody at the path or a peer gone).

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

from protocol import zmtp
from protocol.zmtp import E_PROTOCOL_DECODE, GREETING, ZmtpError

__all__ = ["E_CONTROL_TIMEOUT", "E_DAEMON_NOT_RUNNING", "E_PROTOCOL_DECODE", "ZmtpDealer",
           "ZmtpError"]  # fmt: skip

T = TypeVar("T")

E_CONTROL_TIMEOUT = "E_CONTROL_TIMEOUT"
E_DAEMON_NOT_RUNNING = "E_DAEMON_NOT_RUNNING"
READY = zmtp.ready(b"DEALER")


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
            zmtp.check_greeting(dealer._read(zmtp.GREETING_SIZE, deadline))
            zmtp.check_ready(*dealer._read_frame(deadline))
        except BaseException:
            sock.close()
            raise
        return dealer

    def close(self) -> None:
        self.sock.close()

    def send(self, payload: bytes, deadline: float) -> None:
        self._send(zmtp.frame(payload), deadline)

    def recv(self, deadline: float) -> bytes:
        """The next message: one frame (a ROUTER's reply to a DEALER carries no envelope)."""
        while True:
            flags, data = self._read_frame(deadline)
            if flags & zmtp.COMMAND:
                pong = zmtp.answer(data)
                if pong is not None:
                    self._send(pong, deadline)
                continue
            if flags & zmtp.MORE:
                raise ZmtpError(E_PROTOCOL_DECODE, "a control reply of more than one frame")
            return data

    def _read_frame(self, deadline: float) -> tuple[int, bytes]:
        flags = self._read(1, deadline)[0]
        zmtp.check_flags(flags)
        if flags & zmtp.LONG:
            size = struct.unpack(">Q", self._read(8, deadline))[0]
        else:
            size = self._read(1, deadline)[0]
        zmtp.check_size(size, self.max_frame)
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
