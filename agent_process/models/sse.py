"""Server-sent events off a byte stream, as the HTML standard's event-stream parser reads them.

A streamed model call reads its events here rather than through the SDK's decoder: the SDK
decodes each line to `str`, builds an event object and parses its JSON with `json.loads`,
which for a short reply cost more than the rest of the stream's reading (bench_stream). Here
lines stay bytes and an event's data goes straight to a typed msgspec decoder. Only the
`event` and `data` fields are kept (`id` and `retry` are for browsers reconnecting); lines
may end in CRLF, LF or CR, and an event's data lines are joined with LF.
"""

from __future__ import annotations

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A line (or an event's data) longer than this is refused: a server that never ends one would
otherwise grow the buffer without bound."""

SseEvent = tuple[bytes, bytes]
"""(event name, b"" when unnamed; data)."""


class EventParser:
    """Feed it the body's bytes as they arrive; it returns the events they complete."""

    __slots__ = ("_data", "_event", "_rest", "_size")

    def __init__(self) -> None:
        self._rest = b""
        """The start of a line not ended yet (a lone CR waits too: an LF may follow it)."""
        self._data: list[bytes] = []
        self._size = 0
        """Bytes in `_data`."""
        self._event = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        text = self._rest + chunk
        held = b""
        if text.endswith(b"\r"):
            text, held = text[:-1], b"\r"
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        self._rest = lines.pop() + held
        _bound(len(self._rest), "line")
        events: list[SseEvent] = []
        for line in lines:
            if line:
                self._field(line)
            elif self._data:  # a blank line ends the event
                events.append((self._event, b"\n".join(self._data)))
                self._data, self._size, self._event = [], 0, b""
            else:
                self._event = b""
        return events

    def end(self) -> list[SseEvent]:
        """The body ended: a CR held back was a line end (an event not ended by a blank line
        is not given)."""
        return self.feed(b"\n") if self._rest.endswith(b"\r") else []

    def _field(self, line: bytes) -> None:
        if line[0] == 0x3A:  # b":" starts a comment
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._size += len(value)
            _bound(self._size, "event")
        elif name == b"event":
            self._event = value


def _bound(size: int, what: str) -> None:
    if size > MAX_LINE_BYTES:
        raise ValueError(f"a server-sent {what} longer than {MAX_LINE_BYTES} bytes")
