"""W3C trace-context ids: 32-hex trace ids, 16-hex span ids, and `traceparent` strings."""

from __future__ import annotations

import os
import re

from protocol.errors import ProtocolError

_TRACE_RE = re.compile(r"^[0-9a-f]{32}$")
_SPAN_RE = re.compile(r"^[0-9a-f]{16}$")
_TRACEPARENT_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def new_trace_id() -> str:
    # All-zero ids are invalid in W3C; the chance is 2^-128 but the check is cheap. os.urandom
    # is what secrets.token_hex reads; secrets itself imports hmac and hashlib (OpenSSL), ~2 ms
    # of every process's start, the CLI's included (protocol/__init__ imports this module)
    while (value := os.urandom(16).hex()) == "0" * 32:
        pass
    return value


def new_span_id() -> str:
    while (value := os.urandom(8).hex()) == "0" * 16:
        pass
    return value


def is_trace_id(value: str) -> bool:
    return bool(_TRACE_RE.match(value)) and value != "0" * 32


def is_span_id(value: str) -> bool:
    return bool(_SPAN_RE.match(value)) and value != "0" * 16


def format_traceparent(trace_id: str, span_id: str, sampled: bool = True) -> str:
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def parse_traceparent(header: str) -> tuple[str, str]:
    """Return (trace_id, span_id) of a version-00 `traceparent`; raise ProtocolError otherwise."""
    match = _TRACEPARENT_RE.match(header.strip().lower())
    if not match or not is_trace_id(match[1]) or not is_span_id(match[2]):
        raise ProtocolError(f"not a W3C traceparent: {header!r}")
    return match[1], match[2]
