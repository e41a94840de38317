from __future__ import annotations

from orchestrator.supervision.mailboxes import Mailbox, OpenRequest, RequestBook
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event
from protocol.ids import agent_address

CLI = Source(kind=SourceKind.CLI, name="test")


def _event(text: str, reply: bool = False) -> AgentEvent:
    reply_to = ReplyTo(target="control", correlation_id=f"c-{text}") if reply else None
    return new_event(type="t", input=text, instance_key="k", source=CLI, reply_to=reply_to)


def test_take_moves_the_queue_in_flight_in_order() -> None:
    box = Mailbox()
    events = [_event(str(i)) for i in range(3)]
    box.queue.extend(events)
    assert box.take() == events
    assert list(box.inflight) == [e.id for e in events]
    assert not box.queue


def test_death_returns_the_started_event_and_requeues_the_rest_in_order() -> None:
    box = Mailbox()
    a, b, c, d = (_event(x) for x in "abcd")
    box.queue.extend([a, b, c])
    box.take()
    box.queue.append(d)  # arrived after delivery, before the death
    box.mark_started(a.id)
    crashed = box.on_death()
    assert crashed == a
    assert list(box.queue) == [b, c, d]
    assert not box.inflight
    assert box.started is None


def test_death_before_the_processing_report_blames_the_oldest_event() -> None:
    box = Mailbox()
    a, b = _event("a"), _event("b")
    box.queue.extend([a, b])
    box.take()
    assert box.on_death() == a  # never redelivered: it may be what kills the process
    assert list(box.queue) == [b]


def test_an_answered_request_is_not_blamed_when_its_idle_report_is_lost() -> None:
    # The reply went out, then the process died running the next event before its `idle`
    # and `processing` reports were flushed: the next event is the one that crashed.
    box = Mailbox()
    answered, crash, after = _event("pid", reply=True), _event("crash", reply=True), _event("x")
    box.queue.extend([answered, crash, after])
    box.take()
    box.mark_answered("c-pid")
    assert box.on_death() == crash
    assert list(box.queue) == [after]


def test_marking_an_unknown_correlation_answered_is_ignored() -> None:
    box = Mailbox()
    a = _event("a", reply=True)
    box.queue.append(a)
    box.take()
    box.mark_answered("c-nope")
    assert list(box.inflight) == [a.id]


def test_death_of_an_idle_process_loses_nothing() -> None:
    box = Mailbox()
    a, b = _event("a"), _event("b")
    box.queue.extend([a, b])
    assert box.on_death() is None
    assert list(box.queue) == [a, b]


def test_finished_events_are_not_redelivered() -> None:
    box = Mailbox()
    a, b = _event("a"), _event("b")
    box.queue.extend([a, b])
    box.take()
    box.mark_started(a.id)
    box.mark_done(a.id)
    box.mark_started(b.id)
    assert box.on_death() == b
    assert not box.queue


def test_shutdown_ack_requeues_only_the_named_events() -> None:
    box = Mailbox()
    a, b, c = (_event(x) for x in "abc")
    box.queue.extend([a, b, c])
    box.take()
    assert box.requeue([c.id, b.id]) == [b, c]
    assert list(box.queue) == [b, c]
    assert list(box.inflight) == [a.id]


def test_marking_an_unknown_event_started_is_ignored() -> None:
    box = Mailbox()
    box.mark_started("nope")
    assert box.started is None
    assert box.empty


def test_request_book_open_close_and_served_by() -> None:
    book = RequestBook()
    server = agent_address("coder", "k")
    req = OpenRequest(correlation_id="c1", requester="control", server=server, event_id="e1")
    book.open(req)
    assert book.served_by(server) == [req]
    assert book.close("c1") == req
    assert book.close("c1") is None
    assert len(book) == 0


def test_a_retried_event_goes_first_once_and_is_forgotten_when_done() -> None:
    box = Mailbox()
    a, b = _event("a"), _event("b")
    box.queue.extend([a, b])
    box.take()
    box.mark_started(a.id)
    crashed = box.on_death()
    assert crashed == a and box.retry(a)
    assert list(box.queue) == [a, b]  # first for the replacement, in order
    box.take()
    box.mark_started(a.id)
    assert box.on_death() == a and not box.retry(a)  # twice: answered, not retried again
    assert list(box.queue) == [b] and not box.retried
    c = _event("c")
    box.queue.append(c)
    box.take()
    box.mark_started(c.id)
    assert box.on_death() == c and box.retry(c)
    box.take()
    box.mark_done(c.id)  # the replacement finished it: no memory of it is kept
    assert not box.retried
