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

from enum import StrEnum

import msgspec


class DeltaKind(StrEnum):
    TEXT = "text"
    """`text`: the next characters the model wrote in step `step`."""
    TOOL_STARTED = "tool_started"
    """`tool`, `tool_call_id`: the step's tool call began."""
    TOOL_FINISHED = "tool_finished"
    """`tool`, `tool_call_id`, `status` (ok | error | pending): it returned."""


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
        """The JSON line `goondan send --json` prints: `type` is `text.delta`, `tool.started`
        or `tool.finished` (the reply's own line is the response event, type
        `agent.response`)."""
        line: dict[str, object] = {"type": _EVENT_TYPES[self.kind], "seq": self.seq,
                                   "step": self.step}  # fmt: skip
        if self.kind is DeltaKind.TEXT:
            line["text"] = self.text
        else:
            line.update(tool=self.tool, toolCallId=self.tool_call_id)
            if self.status is not None:
                line["status"] = self.status
        return line


_EVENT_TYPES = {
    DeltaKind.TEXT: "text.delta",
    DeltaKind.TOOL_STARTED: "tool.started",
    DeltaKind.TOOL_FINISHED: "tool.finished",
}


class GapWatch:
    """A receiver's check of a stream's `seq`: after a gap (a delta dropped on the way), the
    text deltas that follow are held back, so the text shown is still a prefix of what the
    step wrote and the reply can finish it without repeating any of it. Tool deltas pass.
    The first delta seen sets the start: a turn resumed after a client-side call goes on
    numbering where its first part stopped."""

    __slots__ = ("broken", "next")

    def __init__(self) -> None:
        self.next: int | None = None
        self.broken = False

    def passes(self, delta: StreamDelta) -> bool:
        if self.next is not None and delta.seq != self.next:
            self.broken = True
        self.next = delta.seq + 1
        return not (self.broken and delta.kind is DeltaKind.TEXT)
