"""What a stop does with the events still queued, and the report `goondan stop` prints.

A graceful stop lets every running turn finish; events queued behind them have not started.
A journaled one (durable ingress, docs/guides/reliability.md) is not answered: it stays open in the
journal and runs after the next start, so its waiting client hears that it was kept. Without a
journal it is dropped, and a waiting sender gets the coded error.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from orchestrator.routing.broker import Intake
from orchestrator.supervision.mailboxes import Mailboxes, RequestBook
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, Source, SourceKind, response_to
from protocol.ids import ORCHESTRATOR, Address

log = structlog.get_logger("goondan.supervisor")
ORCHESTRATOR_SOURCE = Source(kind=SourceKind.ORCHESTRATOR, name=ORCHESTRATOR)


def _kept_error(event: AgentEvent) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.E_AGENT_SHUTTING_DOWN,
        message=f"the daemon is stopping; event {event.id} is kept in the journal and runs "
        "after the next start",
        suggestion=f"after `goondan run`, `goondan send --attach {event.id}` prints its reply",
    )


def park_queued(
    mailboxes: Mailboxes,
    book: RequestBook,
    ingress: Intake,
    respond: Callable[[AgentEvent], None],
    address: Address,
) -> tuple[int, int]:
    """Empty the mailbox of `address` for a stop: (kept, dropped) events. What the ingress
    keeps (journaled) stays for the next start; the rest is answered with `respond`."""
    box = mailboxes.get(address)
    if box is None:
        return 0, 0
    kept = dropped = 0
    for event in box.drain_queue():
        if park(book, ingress, respond, event):
            kept += 1
        else:
            dropped += 1
    return kept, dropped


def park(
    book: RequestBook,
    ingress: Intake,
    respond: Callable[[AgentEvent], None],
    event: AgentEvent,
) -> bool:
    """One event the stop leaves unfinished (queued, or the turn a forced stop killed): kept
    for the next start when the ingress keeps it (True), answered `E_AGENT_SHUTTING_DOWN`
    either way."""
    reply = response_to(event, source=ORCHESTRATOR_SOURCE, text="", error=_kept_error(event))
    if not ingress.keep(event.id, reply):
        if event.reply_to is None:
            log.warning("event_dropped", event_id=event.id, reason="the daemon is stopping")
        else:
            stopping = ErrorInfo(code=ErrorCode.E_AGENT_SHUTTING_DOWN,
                                 message="the daemon is stopping")  # fmt: skip
            respond(response_to(event, source=ORCHESTRATOR_SOURCE, text="", error=stopping))
        return False
    # a waiting client hears it now, and the event stays open in the journal: an agent
    # that asked gets the real reply after the next start
    request = book.get(event.reply_to.correlation_id) if event.reply_to else None
    if request is not None and request.waiter is not None and not request.waiter.done():
        book.close(request.correlation_id)
        request.waiter.set_result(reply)
    return True
