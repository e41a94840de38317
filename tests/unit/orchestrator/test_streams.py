"""A streaming send's deltas on their way to its client: the unread window, text merged while
held, a bounded hold that cuts (never holes) a step's text, and everything held going out
before the final reply."""

from __future__ import annotations

from orchestrator.ingress.streams import ClientStream
from protocol.stream import DeltaKind, StreamDelta


def text(seq: int, chars: str, step: int = 1) -> StreamDelta:
    return StreamDelta(correlation_id="c", seq=seq, kind=DeltaKind.TEXT, step=step, text=chars)


def tool(seq: int, kind: DeltaKind = DeltaKind.TOOL_STARTED) -> StreamDelta:
    return StreamDelta(correlation_id="c", seq=seq, kind=kind, step=1, tool="t__x")


def stream(**limits: int) -> tuple[ClientStream, list[StreamDelta]]:
    out: list[StreamDelta] = []
    return ClientStream(out.append, **limits), out


def test_deltas_go_out_at_once_while_the_client_keeps_up() -> None:
    s, out = stream(window=4)
    for i in range(4):
        s.push(text(i, str(i)))
    assert [d.seq for d in out] == [0, 1, 2, 3]
    s.ack(2)
    s.push(text(4, "4"))
    s.push(text(5, "5"))
    assert [d.seq for d in out] == [0, 1, 2, 3, 4, 5]


def test_past_the_window_text_is_merged_and_released_in_order_on_ack() -> None:
    s, out = stream(window=2)
    for i, chars in enumerate(["a", "b", "c", "d"]):
        s.push(text(i, chars))
    s.push(tool(4))
    s.push(text(5, "e", step=2))
    s.push(text(6, "f", step=2))
    assert "".join(d.text for d in out) == "ab" and s.sent == 2
    s.ack(2)
    assert [(d.seq, d.kind, d.text) for d in out[2:]] == [
        (2, DeltaKind.TEXT, "cd"),
        (4, DeltaKind.TOOL_STARTED, ""),
    ]  # fmt: skip: the window is full again
    s.finish()  # the turn ended: the rest goes now, before the reply
    assert [(d.seq, d.text) for d in out[4:]] == [(5, "ef")]
    s.push(text(7, "late"))
    assert len(out) == 5  # after finish nothing more


def test_a_client_that_never_reads_costs_a_bounded_hold_and_gets_a_prefix() -> None:
    s, out = stream(window=3, hold_chars=10, hold_items=2)
    pieces = [f"{i:02d}." for i in range(100)]  # 300 characters in 3-character deltas
    for i, piece in enumerate(pieces):
        s.push(text(i, piece))
    for i in range(100, 110):
        s.push(tool(i))
    s.ack(-5)  # a count that cannot be right changes nothing
    s.ack(10**9)
    assert s.acked == 0
    s.finish()
    shown = "".join(d.text for d in out if d.kind is DeltaKind.TEXT)
    assert "".join(pieces).startswith(shown) and 9 <= len(shown) <= 9 + 10
    assert len(out) <= 3 + 2 and s.dropped > 0


def test_a_cut_step_drops_its_later_text_but_not_the_next_steps() -> None:
    s, out = stream(window=1, hold_chars=4)
    s.push(text(0, "ab"))  # sent
    s.push(text(1, "cd"))  # held
    s.push(text(2, "efghij"))  # over the hold: step 1 is cut here
    s.push(text(3, "k"))  # dropped too: no hole in step 1
    s.push(text(4, "xy", step=2))
    s.finish()
    assert [(d.step, d.text) for d in out] == [(1, "ab"), (1, "cd"), (2, "xy")]
