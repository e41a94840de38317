"""Mask the bundle's secrets (`Bundle.secret_values`, see `bundles.credentials`) in logged text.

Both the orchestrator and the agent processes redact their own logs, so the masking lives
here, below both. A process installs its secret set once the bundle is loaded (`install`);
the structlog processor and the stream wrapper read the installed set at call time, so they
can be set up before the bundle is known (an agent process configures logging first).
With no secrets installed every function returns its input untouched at the cost of one
attribute test: the hot paths (runtime events, every log line) pay nothing in the common case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import msgspec

MASK = "***"
MIN_SECRET_LEN = 4
"""Shorter values would mask ordinary words and numbers everywhere (same rule as base tools)."""


class Redactor:
    """One alternation of every secret, longest first (a secret containing another one is
    masked whole)."""

    __slots__ = ("_bytes", "_pattern", "longest")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None
        # encoded JSON holds a secret either as is or JSON-escaped (quotes, \\, non-ASCII)
        forms = {f for v in values for f in (v.encode(), msgspec.json.encode(v)[1:-1])}
        ordered = sorted(forms, key=len, reverse=True)
        self._bytes = re.compile(b"|".join(map(re.escape, ordered))) if ordered else None
        self.longest = len(ordered[0]) if ordered else 0
        """Bytes of the longest form of a secret: how far past a cut a secret may reach."""

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def json_bytes(self, data: bytes) -> bytes:
        """Mask secrets in bytes, as they are or JSON-escaped (a runtime-events line, a line
        of a child's output)."""
        if self._bytes is None:
            return data
        return self._bytes.sub(MASK.encode(), data)

    def head(self, data: bytes, limit: int) -> bytes:
        """The first `limit` bytes of `data`, masked; a secret that begins before the cut is
        masked whole, never left as a prefix (so `data` should run `longest` bytes past it)."""
        if self._bytes is None:
            return data[:limit]
        out = bytearray()
        pos = 0
        for match in self._bytes.finditer(data):
            if match.start() >= limit:
                break
            out += data[pos : match.start()]
            out += MASK.encode()
            pos = match.end()
        if pos < limit:
            out += data[pos:limit]
        return bytes(out)

    def value(self, value: Any) -> Any:
        """`value` with every string inside (dict keys and values, list items) masked."""
        if self._pattern is None:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self._walk(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        if isinstance(value, BaseException):
            return self.text(repr(value))
        return value


_installed = Redactor()


def install(secrets: Iterable[str]) -> Redactor:
    """Make `secrets` the set this process masks (replacing the previous set)."""
    global _installed
    _installed = Redactor(secrets)
    return _installed


def current() -> Redactor:
    return _installed


def redact_text(text: str) -> str:
    return _installed.text(text)


def processor(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> Any:
    """structlog processor: mask secrets in every field. Place it after `format_exc_info`
    so tracebacks are masked too, and before the renderer."""
    redactor = _installed
    if not redactor:
        return event
    for key, val in event.items():
        event[key] = redactor.value(val) if not isinstance(val, int | float | bool) else val
    return event


class RedactingStream:
    """A text stream that masks secrets on the way to `target` (a child's stdout/stderr).

    Each write is masked alone, so a secret written in pieces, or through the file descriptor
    directly (C extensions, `os.write`, subprocesses), passes it: the daemon masks the child's
    output again, line by line (`orchestrator/supervision/childlog.py`). This layer keeps whole
    secrets out
    of the pipe in the first place.
    """

    def __init__(self, target: TextIO) -> None:
        self._target = target

    def write(self, text: str) -> int:
        self._target.write(_installed.text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        # fileno, flush, isatty, encoding, buffer...: the wrapped stream's own
        return getattr(self._target, name)
