"""Per-address mailboxes and the open-request book: who is owed what, with no I/O.

A `Mailbox` holds the events of one address: `queue` (waiting for a ready process, in
order) and `inflight` (sent to the current generation and not finished). When the process
dies, the event whose turn had started goes first to the replacement, which resumes its turn;
if a process dies running it a second time it is the one that crashed (a poison event would
kill every replacement) and is answered. The events it had received but not started go back
to the front of the queue for the replacement (ARCHITECTURE.md §5).

The `RequestBook` knows every open correlation id: who asked (an address, or a control
client's future) and which address serves it, so a crash answers the caller at once.

Both are built first by the composition root and handed to the router (which fills and drains
them) and to the supervisor (which reads them to admit, deactivate and forget instances), so
neither reaches into the other for them (ARCHITECTURE.md §5).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from protocol.events import AgentEvent, ReplyTo
from protocol.ids import Address


@dataclass(slots=True)
class Mailbox:
    queue: deque[AgentEvent] = field(default_factory=deque)
    inflight: dict[str, AgentEvent] = field(default_factory=dict)
    """Insertion-ordered: the order the process received them."""
    started: str | None = None
    """The event whose turn the process reported `processing` for."""
    retried: set[str] = field(default_factory=set)
    """Events given again to a replacement after their process died running them."""

    def take(self) -> list[AgentEvent]:
        """Everything queued, now in flight to the current process."""
        events = list(self.queue)
        self.queue.clear()
        for event in events:
            self.inflight[event.id] = event
        return events

    def unsend(self, events: list[AgentEvent]) -> None:
        """`events` (the last ones `take` gave, in order) never reached the process: first in
        the queue again, not in flight."""
        for event in events:
            self.inflight.pop(event.id, None)
        self.queue.extendleft(reversed(events))

    def mark_started(self, event_id: str) -> None:
        if event_id in self.inflight:
            self.started = event_id

    def mark_done(self, event_id: str) -> None:
        self.inflight.pop(event_id, None)
        self.retried.discard(event_id)
        if self.started == event_id:
            self.started = None

    def retry(self, event: AgentEvent) -> bool:
        """`event` was running when its process died (`on_death` returned it): put it first in
        the queue for the replacement, unless it already was given again once; True when so."""
        if event.id in self.retried:
            self.retried.discard(event.id)
            return False
        self.retried.add(event.id)
        self.queue.appendleft(event)
        return True

    def mark_answered(self, correlation_id: str) -> None:
        """The process sent the response to this request: that turn is over.

        A reply travels before the `idle` report, and a process that dies right after may never
        flush the report; without this, `on_death` would blame the answered event and redeliver
        the one that actually crashed (killing the replacement too).
        """
        for event in self.inflight.values():
            if event.reply_to is not None and event.reply_to.correlation_id == correlation_id:
                self.mark_done(event.id)
                return

    def requeue(self, event_ids: list[str] | None = None) -> list[AgentEvent]:
        """Put in-flight events back at the front of the queue, in the order sent.

        With `event_ids`, only those (the child's `shutdown_ack` says which it did not start).
        """
        chosen = [e for e in self.inflight.values() if event_ids is None or e.id in set(event_ids)]
        for event in chosen:
            self.inflight.pop(event.id, None)
        self.queue.extendleft(reversed(chosen))
        return chosen

    def on_death(self, *, drained: bool = False) -> AgentEvent | None:
        """The process is gone: return the event it was running; requeue the rest.

        Without a `processing` report (a process that dies at once may never flush it), the
        oldest event it received is taken as the one it was running: the child works FIFO,
        and redelivering an event that kills its process would kill every replacement. A
        `drained` process (asked to stop) finishes its turn before it exits, so without a
        report it was running nothing: its events are all requeued.
        """
        guess = None if drained else next(iter(self.inflight), None)
        current = self.started if self.started is not None else guess
        crashed = self.inflight.pop(current, None) if current is not None else None
        self.started = None
        self.requeue()
        return crashed

    def drain_queue(self) -> list[AgentEvent]:
        events = list(self.queue)
        self.queue.clear()
        self.retried.difference_update(event.id for event in events)
        return events

    @property
    def empty(self) -> bool:
        return not self.queue and not self.inflight


class Mailboxes(dict[Address, Mailbox]):
    """The mailbox of every address that has one."""

    def box(self, address: Address) -> Mailbox:
        """The mailbox of `address`, made on first use."""
        box = self.get(address)
        if box is None:
            box = self[address] = Mailbox()
        return box

    def forget(self, address: Address) -> None:
        """The instance is hibernated (orchestrator/supervision/hibernation.py): drop its
        mailbox unless something still waits in it."""
        box = self.get(address)
        if box is not None and box.empty:
            del self[address]


@dataclass(frozen=True, slots=True)
class OpenRequest:
    correlation_id: str
    requester: str
    """The `replyTo.target` of the request (an address, or a control client's token)."""
    server: Address | None
    """None when the target could not even be parsed."""
    event_id: str
    waiter: asyncio.Future[AgentEvent] | None = None
    """Set when a control client (`goondan send`) waits in this process."""

    @classmethod
    def of(
        cls,
        request: AgentEvent,
        reply_to: ReplyTo,
        server: Address | None,
        waiter: asyncio.Future[AgentEvent] | None = None,
    ) -> OpenRequest:
        """What `request` (which carries `reply_to`) opens when it goes to `server`."""
        return cls(reply_to.correlation_id, reply_to.target, server, request.id, waiter)


@dataclass(slots=True)
class RequestBook:
    _open: dict[str, OpenRequest] = field(default_factory=dict)

    def open(self, request: OpenRequest) -> None:
        self._open[request.correlation_id] = request

    def close(self, correlation_id: str) -> OpenRequest | None:
        return self._open.pop(correlation_id, None)

    def get(self, correlation_id: str) -> OpenRequest | None:
        return self._open.get(correlation_id)

    def __len__(self) -> int:
        return len(self._open)

    def served_by(self, server: Address) -> list[OpenRequest]:
        return [r for r in self._open.values() if r.server == server]
