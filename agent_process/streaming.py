"""A turn's `delta` frames for the requester that asked for them (ARCHITECTURE.md §4).

A turn streams only when its event's `replyTo.stream` is set and the process has a way out
(`DeltaOut`, the link's non-blocking send). The model's text (`ModelRequest.on_text`) and each
tool call's start and end become `StreamDelta`s, numbered from 0 in the order they happen.
A delta the socket cannot take at once is dropped (a gap in `seq`), never waited for: the turn
runs at the model's pace, and its reply, sent after the last delta, is the whole answer.

Text that arrives in one go (a burst of chunks already read from the provider's socket) costs
the daemon and the client a frame or two, not one per token: its first piece goes out at once
(the time to first delta is what a streaming user waits for), and whatever follows it before
the event loop's next turn rides in one more delta. A model that writes at its own pace gets
each piece out as it comes. A tool call's start and the end of a model call that called tools
flush the text first, so the order holds; what the turn's last model call wrote after its
last delta is left to the reply, which follows at once and carries the whole answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from protocol.conversation import ToolCall
from protocol.events import AgentEvent
from protocol.stream import DeltaKind, StreamDelta

DeltaOut = Callable[[StreamDelta], bool]
"""Send one delta now; False when it had to be dropped."""


class TurnStream:
    __slots__ = ("_correlation_id", "_out", "_text", "dropped", "seq", "step")

    def __init__(self, out: DeltaOut, correlation_id: str) -> None:
        self._out = out
        self._correlation_id = correlation_id
        self._text: list[str] | None = None
        """Text not sent yet (a flush is scheduled while it is not None)."""
        self.seq = 0
        self.step = 0
        """The step in progress; the engine sets it before each model call."""
        self.dropped = 0

    def text(self, chunk: str) -> None:
        """`ModelRequest.on_text`: the model wrote `chunk`."""
        if not chunk:
            return
        if self._text is None:
            self._send(DeltaKind.TEXT, chunk, None)  # the first of a burst: at once
            self._text = []
            asyncio.get_running_loop().call_soon(self.flush)
        else:
            self._text.append(chunk)

    def flush(self) -> None:
        """Send the text written since the last delta (the engine calls it when the model
        call ends)."""
        pending, self._text = self._text, None
        if pending:
            self._send(DeltaKind.TEXT, "".join(pending), None)

    def leave_to_reply(self) -> None:
        """The turn's last step wrote the text not sent yet: the reply, sent right after the
        step, carries it (receivers show what the deltas did not), so it costs no frame."""
        self._text = None

    def tool_started(self, call: ToolCall) -> None:
        self.flush()
        self._send(DeltaKind.TOOL_STARTED, "", call)

    def tool_finished(self, call: ToolCall, status: str) -> None:
        self._send(DeltaKind.TOOL_FINISHED, "", call, status)

    def _send(
        self, kind: DeltaKind, text: str, call: ToolCall | None, status: str | None = None
    ) -> None:
        delta = StreamDelta(
            correlation_id=self._correlation_id, seq=self.seq, kind=kind, step=self.step,
            text=text, tool=call.name if call else None, tool_call_id=call.id if call else None,
            status=status,
        )  # fmt: skip
        self.seq += 1
        if not self._out(delta):
            self.dropped += 1


def stream_of(out: DeltaOut | None, event: AgentEvent, *, asked: bool = False) -> TurnStream | None:
    """The stream of `event`'s turn, or None when nobody asked for one (or there is no way
    out: a runtime outside a child, a test). `asked`: the answer that resumes the turn asked
    for one, though its first request did not."""
    reply_to = event.reply_to
    if out is None or reply_to is None or not (reply_to.stream or asked):
        return None
    return TurnStream(out, reply_to.correlation_id)
