"""The event-stream parser of streamed model calls (agent_process/models/sse.py): the events of
a body are the same however the network cuts it, with any of the three line endings."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_process.models.sse import MAX_LINE_BYTES, EventParser, SseEvent

BODY = (
    b": a comment, then a ping the parser ignores\n\n"
    b'data: {"a": 1}\n\n'
    b"event: error\ndata: first line\ndata:second line\n\n"
    b"id: 7\nretry: 10\ndata:  two spaces keep one\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = [
    (b"", b'{"a": 1}'),
    (b"error", b"first line\nsecond line"),
    (b"", b" two spaces keep one"),
    (b"", b"[DONE]"),
]


def parse(*chunks: bytes) -> list[SseEvent]:
    parser = EventParser()
    return [event for chunk in chunks for event in parser.feed(chunk)] + parser.end()


def test_a_body_read_in_one_go_gives_its_events_in_order() -> None:
    assert parse(BODY) == EVENTS


def test_crlf_and_cr_line_endings_read_as_lf() -> None:
    assert parse(BODY.replace(b"\n", b"\r\n")) == EVENTS
    assert parse(BODY.replace(b"\n", b"\r")) == EVENTS


def test_a_crlf_cut_between_its_cr_and_lf_is_one_line_end() -> None:
    """A lone CR at a read's end waits: read as a line end at once, the LF that follows would
    end the event early (a blank line), splitting the data of one event in two."""
    body = b"data: a\r\ndata: b\r\n\r\n"
    assert parse(body[:8], body[8:]) == [(b"", b"a\nb")]


def test_an_event_the_body_does_not_end_is_not_given() -> None:
    assert parse(b"data: one\n\ndata: half") == [(b"", b"one")]


@given(st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(0, len(BODY) * 2)))
def test_any_cut_of_the_body_gives_the_same_events(eol: bytes, cuts: list[int]) -> None:
    body = BODY.replace(b"\n", eol)
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    assert parse(*(body[a:b] for a, b in itertools.pairwise(points))) == EVENTS


def test_a_line_that_never_ends_is_refused_not_buffered_without_bound() -> None:
    parser = EventParser()
    piece = b"x" * (1 << 20)
    for _ in range(MAX_LINE_BYTES // len(piece)):
        parser.feed(piece)
    with pytest.raises(ValueError, match="longer than"):
        parser.feed(piece)


def test_an_event_of_endless_data_lines_is_refused() -> None:
    parser = EventParser()
    line = b"data: " + b"x" * (1 << 20) + b"\n"
    for _ in range(MAX_LINE_BYTES // (1 << 20)):
        parser.feed(line)
    with pytest.raises(ValueError, match="longer than"):
        parser.feed(line)
