"""A MessagePack encoder/decoder over the standard library alone, for the CLI's thin control
client (`goondan send` must start without importing msgspec: see docs/performance.md, "The
command line"). It handles the values a control message holds (nil, bool, int, float, str,
bin, array, map) and produces the same bytes' meaning msgspec gives a Struct encoded as a map
of its (renamed) field names; extension types are refused.

Every failure on decode is a `ThinDecodeError` (code E_PROTOCOL_DECODE): truncated input,
an unknown type byte, a length past the input, nesting past `MAX_DEPTH`, trailing bytes.
"""

from __future__ import annotations

import struct
from typing import Any

MAX_DEPTH = 64
"""Deeper nesting than any control message has: a hostile peer's deep array cannot recurse
the decoder into a RecursionError."""

E_PROTOCOL_DECODE = "E_PROTOCOL_DECODE"  # ErrorCode.E_PROTOCOL_DECODE, without its import


class ThinDecodeError(ValueError):
    """Bytes that are not one MessagePack value this codec knows."""

    code = E_PROTOCOL_DECODE


def encode(value: Any) -> bytes:
    out = bytearray()
    _encode(value, out, 0)
    return bytes(out)


def _encode(value: Any, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to encode")
    if value is None:
        out.append(0xC0)
    elif value is True or value is False:
        out.append(0xC3 if value else 0xC2)
    elif isinstance(value, int):
        _encode_int(value, out)
    elif isinstance(value, float):
        out += b"\xcb" + struct.pack(">d", value)
    elif isinstance(value, str):
        _encode_str(value.encode("utf-8"), out)
    elif isinstance(value, bytes | bytearray | memoryview):
        _encode_bin(bytes(value), out)
    else:
        _encode_container(value, out, depth)


def _encode_container(value: Any, out: bytearray, depth: int) -> None:
    if isinstance(value, list | tuple):
        _head(len(value), out, 0x90, 0xDC, 0xDD)
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, dict):
        _head(len(value), out, 0x80, 0xDE, 0xDF)
        for key, item in value.items():
            _encode(key, out, depth + 1)
            _encode(item, out, depth + 1)
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")


def _encode_int(value: int, out: bytearray) -> None:
    # the shortest form, as msgspec writes it (so the two agree byte for byte)
    if 0 <= value <= 0x7F or -32 <= value < 0:
        out += struct.pack(">b" if value < 0 else ">B", value)
    elif value >= 0:
        for tag, fmt, top in ((0xCC, ">B", 0xFF), (0xCD, ">H", 0xFFFF), (0xCE, ">I", 0xFFFFFFFF)):
            if value <= top:
                out += bytes((tag,)) + struct.pack(fmt, value)
                return
        if value > 0xFFFFFFFFFFFFFFFF:
            raise OverflowError("int too large to encode")
        out += b"\xcf" + struct.pack(">Q", value)
    else:
        for tag, fmt, low in ((0xD0, ">b", -0x80), (0xD1, ">h", -0x8000), (0xD2, ">i", -(2**31))):
            if value >= low:
                out += bytes((tag,)) + struct.pack(fmt, value)
                return
        if value < -(2**63):
            raise OverflowError("int too small to encode")
        out += b"\xd3" + struct.pack(">q", value)


def _encode_str(data: bytes, out: bytearray) -> None:
    if len(data) < 32:
        out.append(0xA0 | len(data))
    elif len(data) <= 0xFF:
        out += bytes((0xD9, len(data)))
    elif len(data) <= 0xFFFF:
        out += b"\xda" + struct.pack(">H", len(data))
    else:
        out += b"\xdb" + struct.pack(">I", len(data))
    out += data


def _encode_bin(data: bytes, out: bytearray) -> None:
    if len(data) <= 0xFF:
        out += bytes((0xC4, len(data)))
    elif len(data) <= 0xFFFF:
        out += b"\xc5" + struct.pack(">H", len(data))
    else:
        out += b"\xc6" + struct.pack(">I", len(data))
    out += data


def _head(n: int, out: bytearray, fix: int, tag16: int, tag32: int) -> None:
    if n < 16:
        out.append(fix | n)
    elif n <= 0xFFFF:
        out += bytes((tag16,)) + struct.pack(">H", n)
    else:
        out += bytes((tag32,)) + struct.pack(">I", n)


_FIXED: dict[int, tuple[str, int]] = {
    0xCA: (">f", 4), 0xCB: (">d", 8),
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
}  # fmt: skip
# type byte -> (width of its length, kind)
_SIZED: dict[int, tuple[int, str]] = {
    0xD9: (1, "str"), 0xDA: (2, "str"), 0xDB: (4, "str"),
    0xC4: (1, "bin"), 0xC5: (2, "bin"), 0xC6: (4, "bin"),
    0xDC: (2, "array"), 0xDD: (4, "array"), 0xDE: (2, "map"), 0xDF: (4, "map"),
}  # fmt: skip


def decode(data: bytes) -> Any:
    """The one value `data` holds (ThinDecodeError for anything else)."""
    reader = _Reader(memoryview(data))
    value = reader.value(0)
    if reader.pos != len(data):
        raise ThinDecodeError(f"{len(data) - reader.pos} trailing bytes after the value")
    return value


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n > len(self.buf) - self.pos:
            raise ThinDecodeError(f"truncated: {n} bytes announced at offset {self.pos}")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def length(self, width: int) -> int:
        return int.from_bytes(self.take(width), "big")

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ThinDecodeError(f"nested deeper than {MAX_DEPTH}")
        tag = self.take(1)[0]
        if tag <= 0x7F or tag >= 0xE0:
            return tag if tag <= 0x7F else tag - 0x100
        if 0xA0 <= tag <= 0xBF:
            return self.text(tag & 0x1F)
        if 0x90 <= tag <= 0x9F:
            return self.array(tag & 0x0F, depth)
        if 0x80 <= tag <= 0x8F:
            return self.map(tag & 0x0F, depth)
        if tag in (0xC0, 0xC2, 0xC3):
            return None if tag == 0xC0 else tag == 0xC3
        if tag in _FIXED:
            fmt, width = _FIXED[tag]
            return struct.unpack(fmt, self.take(width))[0]
        if tag in _SIZED:
            width, kind = _SIZED[tag]
            return self.sized(kind, self.length(width), depth)
        raise ThinDecodeError(f"unsupported MessagePack type 0x{tag:02x} at offset {self.pos - 1}")

    def sized(self, kind: str, n: int, depth: int) -> Any:
        if kind == "str":
            return self.text(n)
        if kind == "bin":
            return bytes(self.take(n))
        return self.array(n, depth) if kind == "array" else self.map(n, depth)

    def text(self, n: int) -> str:
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError:
            raise ThinDecodeError(f"a str that is not UTF-8 before offset {self.pos}") from None

    def array(self, n: int, depth: int) -> list[Any]:
        # each item takes at least one byte: a huge announced count fails fast, not after allocating
        if n > len(self.buf) - self.pos:
            raise ThinDecodeError(f"truncated: an array of {n} items at offset {self.pos}")
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n: int, depth: int) -> dict[Any, Any]:
        if 2 * n > len(self.buf) - self.pos:
            raise ThinDecodeError(f"truncated: a map of {n} pairs at offset {self.pos}")
        out: dict[Any, Any] = {}
        for _ in range(n):
            key = self.value(depth + 1)
            if not isinstance(key, str | int):
                raise ThinDecodeError(f"a map key of type {type(key).__name__}")
            out[key] = self.value(depth + 1)
        return out
