"""The `Acceptor` of a cluster node: accepting is publishing to the ingress stream; delivery is
the partition owner's consumer, wherever that is (ARCHITECTURE.md §15).

A control client waiting for its reply (`goondan send`) is waited for here, on the node it
talks to: before the event is published, this node subscribes to the core-NATS subject
`goondan.<swarm>.reply.<event id>`, on which the owner publishes the reply (and keeps it 10
minutes in the `replies` bucket for `--attach`). The owner's router tells `finished` when a
turn is over; the consumer then acknowledges the message (after the conversation appends are
in the history stream, `history.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec
import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from orchestrator.cluster.consumers import Consumers
from orchestrator.cluster.ingress import NatsJournal
from orchestrator.ingress.accept import Acceptor
from orchestrator.ingress.journal import Appended, EntryState, JournalEntry, JournalError
from protocol import backoff
from protocol.events import AgentEvent, Source, SourceKind, new_event
from protocol.ids import Address

log = structlog.get_logger("goondan.cluster.accept")
RECHECK_FIRST = 1.0
RECHECK_CAP = 8.0
"""A waiting send reads the `replies` bucket after 1 s without a reply, then after 2, 4 and
every 8 s: a lost reply is found within about 8 s of being kept, and a long turn costs
one read per 8 s."""
_encode = msgspec.msgpack.Encoder().encode
_decode_event = msgspec.msgpack.Decoder(AgentEvent).decode

After = Callable[[Address, Callable[[], Awaitable[None] | None]], None]
"""Run a step once the instance's conversation appends so far are stored (history.py)."""
Waiter = asyncio.Future[AgentEvent] | asyncio.Future[AgentEvent | None]


@dataclass(slots=True)
class _Wait:
    sub: Subscription
    recheck: asyncio.Task[None]


class ClusterAcceptor(Acceptor):
    def __init__(self, journal: NatsJournal, consumers: Consumers, after: After) -> None:
        super().__init__(journal, self._nowhere)
        self.cluster_journal = journal
        self.consumers = consumers
        self.after = after
        """The history writer's `after`: a reply and the acknowledgement wait for the turn's
        conversation appends."""
        self._waits: dict[str, dict[Waiter, _Wait]] = {}
        """Per event id, each waiter's subscription and recheck: a send and an attach (or two
        attaches) can wait for one event, and one ending must not end the other's wait."""
        self._keeping: set[asyncio.Future[None]] = set()
        """Replies being kept in the `replies` bucket (retried; cancelled at close)."""

    @staticmethod
    def _nowhere(
        event: AgentEvent, target: Address, waiter: asyncio.Future[AgentEvent] | None
    ) -> None:
        """Nothing is submitted where it was accepted: the partition's owner pulls it."""

    async def accept(
        self,
        event: AgentEvent,
        target: Address,
        *,
        waiter: asyncio.Future[AgentEvent] | None = None,
        dedupe_key: str | None = None,
    ) -> Appended | None:
        if waiter is not None:
            await self._wait_reply(event.id, waiter)
        try:
            appended = await self.cluster_journal.append(event, str(target), dedupe_key)
        except BaseException:
            if waiter is not None:
                self._unwait(event.id, waiter)
            raise
        if appended.duplicate and waiter is not None:
            self._unwait(event.id, waiter)  # the caller attaches to the first event instead
        return appended

    async def _wait_reply(self, event_id: str, waiter: Waiter) -> None:
        nc = self.cluster_journal.nats.nc
        subject = self.cluster_journal.nats.names.reply_subject(event_id)

        async def on_reply(msg: Msg) -> None:
            try:
                reply = _decode_event(msg.data)
            except msgspec.DecodeError:
                log.warning("reply_unreadable", event_id=event_id)
                return
            if not waiter.done():
                waiter.set_result(reply)

        sub = await nc.subscribe(subject, cb=on_reply)
        recheck = asyncio.ensure_future(self._recheck(event_id, waiter))
        self._waits.setdefault(event_id, {})[waiter] = _Wait(sub, recheck)
        waiter.add_done_callback(lambda _f: self._unwait(event_id, waiter))

    async def _recheck(self, event_id: str, waiter: Waiter) -> None:
        """The `replies` bucket, read while no reply came: first after RECHECK_FIRST, then
        less and less often. A reply published while a NATS server on its way died is lost
        (core NATS), and the client waited its whole timeout for a turn that had finished
        (docs/cluster.md "Faults": after `nats_kill`, 30 s)."""
        attempt = 0
        while not waiter.done():
            await asyncio.sleep(backoff.delay(attempt, first=RECHECK_FIRST, cap=RECHECK_CAP))
            attempt += 1
            try:
                entry = await self.cluster_journal.lookup(event_id)
            except JournalError:
                continue  # the bucket does not answer now: the next look
            if entry is not None and entry.reply is not None and not waiter.done():
                log.info("reply_recovered", event_id=event_id)
                waiter.set_result(entry.reply)

    def _unwait(self, event_id: str, waiter: Waiter | None = None) -> None:
        """Stop `waiter`'s wait for `event_id`'s reply, or every wait for it."""
        waits = self._waits.get(event_id, {})
        for one in [waiter] if waiter is not None else list(waits):
            wait = waits.pop(one, None)
            if wait is not None:
                self._background(_unsubscribe(wait.sub))
                wait.recheck.cancel()
        if not waits:
            self._waits.pop(event_id, None)

    # -- what the owner's router reports ----------------------------------------------------

    def started(self, event_id: str) -> None:
        return None  # the consumer's in-progress marks keep it ours

    def finished(self, event_id: str, reply: AgentEvent | None = None) -> None:
        for future in self._attached.pop(event_id, []):
            if not future.done():
                future.set_result(reply)
        held = self.consumers.held.get(event_id)
        if held is None:
            return
        if reply is not None:
            self.after(held.target, lambda: self._reply(event_id, reply))
        self.after(held.target, lambda: self._complete(event_id))

    async def _reply(self, event_id: str, reply: AgentEvent) -> None:
        """Published to the waiting node (core NATS: lost if a server on its way dies), and
        kept in the `replies` bucket, where the waiting node looks when no reply came. The
        keeping is retried off the instance's queue: its next turn does not wait for it."""
        nats_ = self.cluster_journal.nats
        with contextlib.suppress(nats.errors.Error):
            await nats_.nc.publish(nats_.names.reply_subject(event_id), _encode(reply))
        keeping = asyncio.ensure_future(self.cluster_journal.complete(event_id, reply))
        self._keeping.add(keeping)
        keeping.add_done_callback(self._keeping.discard)

    def _complete(self, event_id: str) -> None:
        self.consumers.complete(event_id)

    def keep(self, event_id: str, reply: AgentEvent) -> bool:
        """At a stop: an event this node holds and did not finish is redelivered to the next
        owner (never acknowledged here)."""
        if not self.consumers.holds(event_id):
            return False
        for future in self._attached.pop(event_id, []):
            if not future.done():
                future.set_result(reply)
        return True

    @property
    def lag(self) -> tuple[int, int]:
        return len(self.consumers.held), 0

    async def recover(self) -> int:
        return 0  # the consumers deliver again what no one acknowledged

    async def attach(
        self, event_id: str
    ) -> tuple[JournalEntry, asyncio.Future[AgentEvent | None] | None] | None:
        """Finished (its reply kept 10 minutes), or waited for on the reply subject. An id
        this swarm never accepted waits until the client's timeout (the stream is not
        searched by event id)."""
        future: asyncio.Future[AgentEvent | None] = asyncio.get_running_loop().create_future()
        await self._wait_reply(event_id, future)
        try:
            entry = await self.cluster_journal.lookup(event_id)
        except JournalError:  # the bucket does not answer now (an election): the recheck looks
            entry = None
        if entry is not None:
            future.cancel()
            return entry, None
        placeholder = JournalEntry(seq=0, event=_placeholder(event_id), target="",
                                   state=EntryState.ACCEPTED, attempts=0,
                                   accepted_at=0.0)  # fmt: skip
        return placeholder, future

    async def compact_forever(self, every: float = 300.0) -> None:
        await asyncio.Event().wait()  # the stream's max age and the buckets' TTLs bound them

    async def close(self) -> None:
        for event_id in list(self._waits):
            self._unwait(event_id)
        for keeping in list(self._keeping):
            keeping.cancel()
        await super().close()


def _placeholder(event_id: str) -> AgentEvent:
    event = new_event(type="input", input="", instance_key="",
                      source=Source(kind=SourceKind.CLI, name="attach"))  # fmt: skip
    return msgspec.structs.replace(event, id=event_id)


async def _unsubscribe(sub: Subscription) -> None:
    with contextlib.suppress(nats.errors.Error):
        await sub.unsubscribe()
