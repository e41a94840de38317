"""The deltas of one streaming `goondan send` on their way to its client (ARCHITECTURE.md §4).

Deltas go out as interim `ControlReply(delta=...)` frames the moment they arrive, in order,
but at most `window` of them unread: the client acknowledges what it has read (`StreamAck`),
and past the window they are held. Held text of one step is merged into one delta, up to
`hold_chars` characters; beyond that, and beyond `hold_items` held deltas, they are dropped
(and the rest of that step's text with them, so what the client prints is always a prefix of
what the model wrote). So a client that reads slowly, or not at all, costs the daemon a
bounded amount of memory, never a stalled turn; and because the window is far below the
socket's high-water mark, the final reply (sent after `finish`) is never the frame dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from protocol.control import STREAM_WINDOW
from protocol.stream import DeltaKind, StreamDelta

HOLD_CHARS = 64 * 1024
HOLD_ITEMS = 256


@dataclass(slots=True)
class _Held:
    delta: StreamDelta
    parts: list[str] = field(default_factory=list)
    """Text merged into `delta` while it waited."""

    def merged(self) -> StreamDelta:
        if not self.parts:
            return self.delta
        return msgspec.structs.replace(self.delta, text=self.delta.text + "".join(self.parts))


class ClientStream:
    def __init__(
        self,
        emit: Callable[[StreamDelta], None],
        *,
        window: int = STREAM_WINDOW,
        hold_chars: int = HOLD_CHARS,
        hold_items: int = HOLD_ITEMS,
    ) -> None:
        self._emit = emit
        self._window = window
        self._hold_chars = hold_chars
        self._hold_items = hold_items
        self._held: deque[_Held] = deque()
        self._held_chars = 0
        self._cut_step: int | None = None
        self.sent = 0
        self.acked = 0
        self.dropped = 0
        self.closed = False

    def push(self, delta: StreamDelta) -> None:
        """A delta of the turn: out now, or held while the client is a window behind."""
        if self.closed:
            return
        if self._held or self.sent - self.acked >= self._window:
            self._hold(delta)
        else:
            self._send(delta)

    def ack(self, received: int) -> None:
        """The client has read `received` deltas (a stale or impossible count changes
        nothing)."""
        if self.acked < received <= self.sent:
            self.acked = received
        while self._held and self.sent - self.acked < self._window:
            self._release()

    def finish(self) -> None:
        """The turn is over: what is held goes out now, before the final reply."""
        while self._held:
            self._release()
        self.closed = True

    def _send(self, delta: StreamDelta) -> None:
        self.sent += 1
        self._emit(delta)

    def _release(self) -> None:
        held = self._held.popleft()
        self._held_chars -= len(held.delta.text) + sum(map(len, held.parts))
        self._send(held.merged())

    def _hold(self, delta: StreamDelta) -> None:
        text = delta.kind is DeltaKind.TEXT
        if text and delta.step == self._cut_step:
            self.dropped += 1
            return
        if text and self._held_chars + len(delta.text) > self._hold_chars:
            self._cut(delta)
            return
        last = self._held[-1] if self._held else None
        if text and last is not None and last.delta.kind is DeltaKind.TEXT \
                and last.delta.step == delta.step:  # fmt: skip
            last.parts.append(delta.text)
        elif len(self._held) < self._hold_items:
            self._held.append(_Held(delta))
        else:
            self._cut(delta)
            return
        self._held_chars += len(delta.text)

    def _cut(self, delta: StreamDelta) -> None:
        self.dropped += 1
        if delta.kind is DeltaKind.TEXT:
            self._cut_step = delta.step
