"""ZMTP 3.x, the wire under ZeroMQ's ipc transport, as far as goondan's own DEALERs speak it
(rfc.zeromq.org/spec/23; 3.1, spec 37, adds PING/PONG): the 64-byte greeting with the NULL
mechanism, a READY command (socket type, and the routing identity a ROUTER files the peer
under), then messages of one frame each way. No I/O here: the CLI's blocking control client
(`orchestrator/control/zmtp.py`) and an agent's link on its event loop (`agent_process/dealer.py`)
each drive these pieces over an AF_UNIX stream socket, so neither needs libzmq (a context, two
threads and a thread hop per message in every agent process).

The peer is untrusted input: every length is checked against the caller's bound before it is
buffered, and every violation is a `ZmtpError` with an ErrorCode's value.
"""

from __future__ import annotations

import struct

E_PROTOCOL_DECODE = "E_PROTOCOL_DECODE"

MORE, LONG, COMMAND = 0x01, 0x02, 0x04
_MECHANISM = b"NULL".ljust(20, b"\x00")
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + _MECHANISM + b"\x00" + b"\x00" * 31
"""Signature, version 3.0, NULL, as-server 0, filler: 64 bytes."""
GREETING_SIZE = 64
_LONG_SIZE = struct.Struct(">Q")
_PROPERTY_SIZE = struct.Struct(">I")


class ZmtpError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def frame(data: bytes, flags: int = 0) -> bytes:
    if len(data) <= 0xFF:
        return bytes((flags, len(data))) + data
    return bytes((flags | LONG,)) + _LONG_SIZE.pack(len(data)) + data


def command(name: bytes, body: bytes) -> bytes:
    return frame(bytes((len(name),)) + name + body, COMMAND)


def ready(socket_type: bytes, identity: bytes = b"") -> bytes:
    """READY naming `socket_type`; with `identity`, the routing id a ROUTER files us under."""
    body = _property(b"Socket-Type", socket_type)
    if identity:
        body += _property(b"Identity", identity)
    return command(b"READY", body)


def _property(name: bytes, value: bytes) -> bytes:
    return bytes((len(name),)) + name + _PROPERTY_SIZE.pack(len(value)) + value


def check_greeting(greeting: bytes) -> None:
    if greeting[0] != 0xFF or not greeting[9] & 0x01:
        raise ZmtpError(E_PROTOCOL_DECODE, "the peer's greeting is not a ZMTP signature")
    if greeting[10] < 3:
        raise ZmtpError(E_PROTOCOL_DECODE, f"the peer speaks ZMTP {greeting[10]}, not 3.x")
    if greeting[12:32] != _MECHANISM:
        raise ZmtpError(E_PROTOCOL_DECODE, "the peer's security mechanism is not NULL")


def check_ready(flags: int, data: bytes, peer_type: bytes = b"ROUTER") -> None:
    if not flags & COMMAND or command_name(data) != b"READY":
        raise ZmtpError(E_PROTOCOL_DECODE, "the peer's first command is not READY")
    if properties(data[6:]).get(b"Socket-Type") != peer_type:
        raise ZmtpError(E_PROTOCOL_DECODE, f"the peer is not a {peer_type.decode()} socket")


def check_flags(flags: int) -> None:
    if flags & ~(MORE | LONG | COMMAND):
        raise ZmtpError(E_PROTOCOL_DECODE, f"reserved frame flag bits set: 0x{flags:02x}")


def check_size(size: int, max_frame: int) -> None:
    if size > max_frame:
        raise ZmtpError(E_PROTOCOL_DECODE, f"a frame of {size} bytes (at most {max_frame})")


def command_name(data: bytes) -> bytes:
    if not data or data[0] + 1 > len(data):
        raise ZmtpError(E_PROTOCOL_DECODE, "a truncated ZMTP command")
    return data[1 : 1 + data[0]]


def answer(data: bytes) -> bytes | None:
    """What a command other than READY asks back: a PING's PONG (with the PING's context),
    else None (skipped); an ERROR command raises."""
    name = command_name(data)
    if name == b"PING":
        if len(data) < 7:
            raise ZmtpError(E_PROTOCOL_DECODE, "a PING command without its TTL")
        return command(b"PONG", data[7:])
    if name == b"ERROR":
        raise ZmtpError(E_PROTOCOL_DECODE, "the peer sent a ZMTP ERROR command")
    return None


def properties(body: bytes) -> dict[bytes, bytes]:
    """READY's metadata: name (1-byte length), value (4-byte length), repeated."""
    found: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(body):
        name_end = pos + 1 + body[pos]
        if name_end + 4 > len(body):
            raise ZmtpError(E_PROTOCOL_DECODE, "a truncated READY property")
        size = _PROPERTY_SIZE.unpack_from(body, name_end)[0]
        if name_end + 4 + size > len(body):
            raise ZmtpError(E_PROTOCOL_DECODE, "a READY property longer than its command")
        found[body[pos + 1 : name_end]] = body[name_end + 4 : name_end + 4 + size]
        pos = name_end + 4 + size
    return found


class FrameReader:
    """Bytes in, frames out, for a stream read in arbitrary pieces: first the peer's greeting
    (checked), then (flags, body) per frame. A frame's announced size is checked against
    `max_frame` before any of its body is kept. At the first violation the frames before it are
    still returned and `error` is set: the connection must then close."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self.error: ZmtpError | None = None
        self._buffer = bytearray()
        self._greeted = False

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The frames `data` completes, in order (none once `error` is set)."""
        if self.error is not None:
            return []
        frames: list[tuple[int, bytes]] = []
        try:
            self._parse(data, frames)
        except ZmtpError as exc:
            self.error = exc
        return frames

    def _parse(self, data: bytes, frames: list[tuple[int, bytes]]) -> None:
        buffer = self._buffer
        buffer += data
        if not self._greeted:
            if len(buffer) < GREETING_SIZE:
                return
            check_greeting(bytes(buffer[:GREETING_SIZE]))
            del buffer[:GREETING_SIZE]
            self._greeted = True
        pos, end = 0, len(buffer)
        try:
            while end - pos >= 2:
                flags = buffer[pos]
                check_flags(flags)
                if flags & LONG:
                    if end - pos < 9:
                        break
                    size, start = _LONG_SIZE.unpack_from(buffer, pos + 1)[0], pos + 9
                else:
                    size, start = buffer[pos + 1], pos + 2
                check_size(size, self.max_frame)
                if end - start < size:
                    break
                frames.append((flags, bytes(buffer[start : start + size])))
                pos = start + size
        finally:
            del buffer[:pos]
