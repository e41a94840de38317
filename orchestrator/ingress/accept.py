"""Accepting an event: into the journal first, then to the router, in the order accepted.

Every event the daemon accepts from outside or from an agent (a `goondan send`, a connector's
event, an `agents__send` or `agents__request`) goes through `Acceptor.accept`: the journal
append is awaited (durable, group-committed with whatever else is being accepted), and only
then is the event submitted for delivery and the sender told it was accepted. Submission keeps
acceptance order even when appends finish out of order. The router reports when a process
starts an event's turn (`started`) and when the turn is over (`finished`, with the reply when
there is one); after a crash `recover` submits again everything not finished, oldest first.
This is the journal's `Ingress` (orchestrator/ingress/port.py); with no journal
(`Swarm.spec.policy.ingress.journal: off`) the daemon uses `direct.DirectIngress`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from orchestrator.ingress.journal import Appended, EntryState, Journal, JournalEntry, JournalError
from protocol.errors import ErrorInfo, ProtocolError
from protocol.events import AgentEvent
from protocol.ids import Address, parse_address

log = structlog.get_logger("goondan.accept")
COMPACT_EVERY = 300.0
ENDED_KEPT = 256
Submit = Callable[[AgentEvent, Address, "asyncio.Future[AgentEvent] | None"], None]


@dataclass(slots=True)
class _Accepting:
    append: asyncio.Task[Appended]
    event: AgentEvent
    target: Address
    waiter: asyncio.Future[AgentEvent] | None


class Acceptor:
    def __init__(self, journal: Journal, submit: Submit) -> None:
        self.journal = journal
        self._submit = submit
        self._order: deque[_Accepting] = deque()
        self._open: set[str] = set()
        """Journaled events whose turn has not finished (only these are claimed/completed)."""
        self._attached: dict[str, list[asyncio.Future[AgentEvent | None]]] = {}
        self._ended: OrderedDict[str, AgentEvent | None] = OrderedDict()
        """The replies of the turns that ended last (for an `attach` that read the journal
        before their completion was written)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._recovering = False
        """While `recover` reads what an earlier daemon left: new events wait behind it."""

    async def accept(
        self,
        event: AgentEvent,
        target: Address,
        *,
        waiter: asyncio.Future[AgentEvent] | None = None,
        dedupe_key: str | None = None,
    ) -> Appended | None:
        """Durable when it returns. None without a journal; `duplicate` when `dedupe_key` was
        seen within its window (then nothing is submitted). Raises JournalError.

        An event whose sender is answered by its reply (it has `replyTo`) is submitted at once,
        while the append's fsync runs: the reply takes a whole turn, so the sender still hears
        nothing before the event is durable, and the turn does not wait for the disk. Not when
        an earlier event still waits for its append (order first), nor with a dedupe key (a
        repeat must not run)."""
        append = asyncio.ensure_future(self.journal.append(event, str(target), dedupe_key))
        alone = not self._order and not self._recovering
        if event.reply_to is not None and dedupe_key is None and alone:
            self._open.add(event.id)
            self._submit(event, target, waiter)
            return await asyncio.shield(append)
        item = _Accepting(append, event, target, waiter)
        self._order.append(item)
        try:
            appended = await asyncio.shield(item.append)
        finally:
            self._flush()
        return appended

    @property
    def lag(self) -> tuple[int, int]:
        """(journaled events whose turn has not finished, events waiting for their append):
        the journal's lag, for the metrics."""
        return len(self._open), len(self._order)

    def take(
        self, event: AgentEvent, target: Address, answered: Callable[[ErrorInfo | None], None]
    ) -> None:
        """`accept` for an event a process sent (no awaiting in the frame handler):
        `answered(None)` once it is durable and submitted, `answered(error)` if it is not."""

        async def taking() -> None:
            try:
                await self.accept(event, target)
            except JournalError as exc:
                answered(ErrorInfo(code=exc.code, message=exc.message, suggestion=exc.suggestion))
            else:
                answered(None)

        self._background(taking())

    def _flush(self) -> None:
        """Submit, in acceptance order, every event whose append is done (once what an
        earlier daemon left has been submitted)."""
        while self._order and self._order[0].append.done() and not self._recovering:
            item = self._order.popleft()
            if item.append.cancelled() or item.append.exception() is not None:
                continue  # its sender is told it was not accepted
            appended = item.append.result()
            if appended.duplicate:
                continue
            self._open.add(item.event.id)
            self._submit(item.event, item.target, item.waiter)

    # -- what the router reports --------------------------------------------------------

    def started(self, event_id: str) -> None:
        if event_id in self._open:
            self._background(self.journal.claim(event_id))

    def finished(self, event_id: str, reply: AgentEvent | None = None) -> None:
        """The event's turn ended (with its reply; a turn with a reply also ends without one
        when its process reports idle)."""
        if reply is not None or event_id not in self._ended:
            self._ended[event_id] = reply
            self._ended.move_to_end(event_id)
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
        for future in self._attached.pop(event_id, []):
            if not future.done():
                future.set_result(reply)
        if event_id in self._open:
            self._open.discard(event_id)
            self._background(self.journal.complete(event_id, reply))

    def keep(self, event_id: str, reply: AgentEvent) -> bool:
        """For a stop: whether `event_id` stays open in the journal (it runs after the next
        start). Clients attached to it hear `reply` now."""
        if event_id not in self._open:
            return False
        for future in self._attached.pop(event_id, []):
            if not future.done():
                future.set_result(reply)
        return True

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and isinstance(task.exception(), JournalError):
            # not fatal: an unrecorded claim or completion only means a redelivery after a
            # crash, which the conversation's event records turn into an acknowledgement
            log.error("journal_update_failed", error=str(task.exception()))

    # -- after a crash, and for clients that re-attach ------------------------------------

    async def recover(self) -> int:
        """Submit again every event an earlier daemon accepted and did not finish, before
        anything this one accepts meanwhile (FIFO per sender holds across a crash)."""
        self._recovering = True
        try:
            entries = await self.journal.pending()
            mine = self._open | {item.event.id for item in self._order}
            for entry in entries:
                if entry.event.id not in mine:  # accepted by this daemon: submitted by it
                    self._redeliver(entry)
        finally:
            self._recovering = False
            self._flush()
        return len(entries)

    def _redeliver(self, entry: JournalEntry) -> None:
        try:
            target = parse_address(entry.target)
        except ProtocolError:
            log.error("journal_bad_target", event_id=entry.event.id, target=entry.target)
            return
        claimed = entry.state is EntryState.CLAIMED  # its turn was cut: it resumes
        log.info("event_redelivered", event_id=entry.event.id, target=entry.target,
                 attempts=entry.attempts, claimed=claimed)  # fmt: skip
        self._open.add(entry.event.id)
        self._submit(entry.event, target, None)

    async def attach(
        self, event_id: str
    ) -> tuple[JournalEntry, asyncio.Future[AgentEvent | None] | None] | None:
        """(the journal's entry, a future of its reply while its turn runs: None when the
        turn ends without one) for a client that re-attaches to an event it sent; None when
        the journal does not know the event."""
        entry = await self.journal.lookup(event_id)
        if entry is None:
            return None
        if entry.state is EntryState.COMPLETED:
            return entry, None
        future: asyncio.Future[AgentEvent | None] = asyncio.get_running_loop().create_future()
        if event_id in self._ended:  # it ended while the journal was read
            future.set_result(self._ended[event_id])
        else:
            self._attached.setdefault(event_id, []).append(future)
        return entry, future

    async def compact_forever(self, every: float = COMPACT_EVERY) -> None:
        """Drop finished entries past their windows now and then: the journal stays bounded
        (the conversations are the record)."""
        while True:
            dropped = await self.journal.compact()
            if dropped:
                log.info("journal_compacted", dropped=dropped)
            await asyncio.sleep(every)

    async def close(self) -> None:
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, JournalError):
                await task
        await self.journal.close()

    async def pending_targets(self) -> list[str]:
        return [entry.target for entry in await self.journal.pending()]
