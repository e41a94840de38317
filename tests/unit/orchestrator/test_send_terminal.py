"""`goondan send` on a terminal: deltas printed as they come, then what they did not show of the
reply; after a delta lost on the way, the text waits for the reply, so nothing prints twice."""

from __future__ import annotations

import io

from orchestrator.commands.send import Terminal
from protocol.stream import DeltaKind, StreamDelta


def _text(seq: int, text: str, step: int = 0) -> StreamDelta:
    return StreamDelta(correlation_id="c", seq=seq, kind=DeltaKind.TEXT, step=step, text=text)


def test_the_reply_finishes_what_the_deltas_showed() -> None:
    out, err = io.StringIO(), io.StringIO()
    terminal = Terminal(out, err)
    for delta in (_text(0, "ab"), _text(1, "cd")):
        terminal.delta(delta)
    terminal.reply("abcdef")
    assert out.getvalue() == "abcdef\n"


def test_after_a_lost_delta_the_rest_comes_with_the_reply_once() -> None:
    out, err = io.StringIO(), io.StringIO()
    terminal = Terminal(out, err)
    started = StreamDelta(correlation_id="c", seq=3, kind=DeltaKind.TOOL_STARTED, step=0,
                          tool="t", tool_call_id="k")  # fmt: skip
    for delta in (_text(0, "ab"), _text(2, "ef"), started, _text(4, "gh")):  # seq 1 lost
        terminal.delta(delta)
    terminal.reply("abcdefgh")
    # the tool's line on stderr ended the stdout line; the reply prints only what was not shown
    assert out.getvalue() == "ab\ncdefgh\n"
    assert "running t" in err.getvalue()
