"""What a turn streams to whoever waits for its reply (ARCHITECTURE.md §4, the `delta` frame).

A `StreamDelta` is one piece of a turn in progress: model text as it is written, or a tool call
that started or finished. The agent numbers the deltas of a turn from 0 (`seq`) and sends them
in order, before its reply; the orchestrator passes them on to the requester (a control client
that asked with `SendText.stream`, or a connector that emitted with a delta callback).

Deltas are best-effort: never journaled, dropped where a receiver cannot keep up (a gap in
`seq`), and text deltas may reach a slow client merged. The reply that follows is the whole
truth: the final text, the usage, and what the conversation on disk holds.
"""

from __future__ import annotations

import msgspec

from protocol.stream_view import DeltaKind as DeltaKind
from protocol.stream_view import GapWatch as GapWatch
from protocol.stream_view import delta_line


class StreamDelta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    correlation_id: str
    """The request's `replyTo.correlationId`: whose turn this is a piece of."""
    seq: int
    """0, 1, 2 ... per turn; a gap means deltas were dropped on the way."""
    kind: DeltaKind
    step: int = 0
    """The turn's step (1, 2, ...): text of a new step starts a new paragraph of the answer;
    the reply is the text of the last step."""
    text: str = ""
    tool: str | None = None
    tool_call_id: str | None = None
    status: str | None = None

    def event(self) -> dict[str, object]:
        """The JSON line `goondan send --json` prints (`protocol.stream_view.delta_line`)."""
        return delta_line(self)
