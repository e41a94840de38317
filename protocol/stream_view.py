"""A stream's deltas as a receiver reads them, on the standard library alone (`goondan send`
shows them without importing msgspec; `protocol.stream` holds the wire's `StreamDelta` and
re-exports the names here).

`Delta` is what a receiver reads of a delta, whichever codec decoded it: a `StreamDelta`, or a
`PlainDelta` made from the map the thin codec decodes (`PlainDelta.from_wire` checks each
field as msgspec would, so a malformed delta is refused the same way).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol


class DeltaKind(StrEnum):
    TEXT = "text"
    """`text`: the next characters the model wrote in step `step`."""
    TOOL_STARTED = "tool_started"
    """`tool`, `tool_call_id`: the step's tool call began."""
    TOOL_FINISHED = "tool_finished"
    """`tool`, `tool_call_id`, `status` (ok | error | pending): it returned."""


if TYPE_CHECKING:  # annotations only: a Protocol class costs its import time in every send

    class Delta(Protocol):
        @property
        def seq(self) -> int: ...
        @property
        def kind(self) -> DeltaKind: ...
        @property
        def step(self) -> int: ...
        @property
        def text(self) -> str: ...
        @property
        def tool(self) -> str | None: ...
        @property
        def tool_call_id(self) -> str | None: ...
        @property
        def status(self) -> str | None: ...


class PlainDelta(NamedTuple):
    """A delta decoded without msgspec (the fields of `protocol.stream.StreamDelta`)."""

    correlation_id: str
    seq: int
    kind: DeltaKind
    step: int = 0
    text: str = ""
    tool: str | None = None
    tool_call_id: str | None = None
    status: str | None = None

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> PlainDelta:
        """The delta of a decoded map with camelCase keys and defaults left out; ValueError
        naming the first field that is missing or of the wrong type."""
        return cls(
            correlation_id=_field(data, "correlationId", str),
            seq=_field(data, "seq", int),
            kind=DeltaKind(_field(data, "kind", str)),
            step=_field(data, "step", int, 0),
            text=_field(data, "text", str, ""),
            tool=_field(data, "tool", str, None),
            tool_call_id=_field(data, "toolCallId", str, None),
            status=_field(data, "status", str, None),
        )


_MISSING: Any = object()


def _field(data: dict[str, Any], name: str, kind: type, default: Any = _MISSING) -> Any:
    value = data.get(name, default)
    if value is _MISSING:
        raise ValueError(f"a delta without `{name}`")
    if value is default or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise ValueError(f"a delta's `{name}` is not a {kind.__name__}")


def delta_line(delta: Delta) -> dict[str, object]:
    """The JSON line `goondan send --json` prints: `type` is `text.delta`, `tool.started` or
    `tool.finished` (the reply's own line is the response event, type `agent.response`)."""
    line: dict[str, object] = {"type": _EVENT_TYPES[delta.kind], "seq": delta.seq,
                               "step": delta.step}  # fmt: skip
    if delta.kind is DeltaKind.TEXT:
        line["text"] = delta.text
    else:
        line.update(tool=delta.tool, toolCallId=delta.tool_call_id)
        if delta.status is not None:
            line["status"] = delta.status
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

    def passes(self, delta: Delta) -> bool:
        if self.next is not None and delta.seq != self.next:
            self.broken = True
        self.next = delta.seq + 1
        return not (self.broken and delta.kind is DeltaKind.TEXT)
