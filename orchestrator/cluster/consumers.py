"""One durable pull consumer per owned partition: events in stream order to the router, each
acknowledged only when its turn is over (ARCHITECTURE.md §15).

The consumer `p<N>` filters `goondan.<swarm>.in.<N>.>` and belongs to the partition, not to a
node: whoever holds the partition's lease pulls from it. Its `ack_wait` is the lease TTL and
the owner marks every message it holds `in_progress` each third of it, so when a node dies
what it held is redelivered about when its leases expire, to the node that takes them, and
nothing it finished is delivered again. Messages are handed to the router in stream order,
and the router keeps a FIFO per instance: an instance's turns follow its ingress order, while
instances run in parallel. A message delivered again while its event is still here (an ack
wait that ran out during a NATS election) only replaces the handle used to acknowledge it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from orchestrator.cluster.ingress import Envelope, decode_envelope
from orchestrator.cluster.link import Nats
from protocol import backoff
from protocol.errors import ProtocolError
from protocol.ids import Address, parse_address

log = structlog.get_logger("goondan.cluster.consumers")
FETCH_BATCH = 64
FETCH_WAIT = 2.0
BUSY_WAIT = 0.02
MAX_INFLIGHT = 512
"""Per partition: events pulled and not finished (queued behind their instance's turn too)."""
START_RETRY = 0.1
"""The first pause before a consumer's start is asked again (then doubling, up to ttl/2)."""
_UNANSWERED = (
    TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
)  # fmt: skip
"""No answer, or JetStream saying it has no leader yet: worth asking again."""

Deliver = Callable[[Envelope, Address], None]


@dataclass(slots=True)
class Held:
    msg: Msg
    partition: int
    target: Address


@dataclass
class Consumers:
    """The `PartitionHandler` of a node (leases.py): pulls, holds and acknowledges."""

    nats: Nats
    ttl: float
    deliver: Deliver
    """Hand one event (or response) to the router (the node's `Delivery.take`)."""
    drop: Callable[[int], None]
    """The partition is lost: stop its instances now, forget their queued work."""
    settle: Callable[[int], Awaitable[None]]
    """The partition is given away: wait (bounded) for its running turns, stop its instances."""
    held: dict[str, Held] = field(default_factory=dict)
    _loops: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    _room: dict[int, asyncio.Event] = field(default_factory=dict)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def owned(self) -> list[int]:
        return sorted(self._loops)

    def count(self, partition: int) -> int:
        return sum(1 for h in self.held.values() if h.partition == partition)

    # -- PartitionHandler ----------------------------------------------------------------

    async def gained(self, partition: int) -> None:
        sub = await self._subscribe(partition)
        self._room[partition] = asyncio.Event()
        self._loops[partition] = asyncio.ensure_future(self._pull(partition, sub))

    async def release(self, partition: int) -> None:
        await self._stop_loop(partition)
        await self.settle(partition)
        self._forget(partition, hand_over=True)

    def lost(self, partition: int) -> None:
        task = self._loops.pop(partition, None)
        if task is not None:
            task.cancel()
        self._forget(partition)
        self.drop(partition)

    # -- acknowledging ---------------------------------------------------------------------

    def complete(self, event_id: str) -> bool:
        """The event's turn is over (its effect is in the conversation): acknowledge it.
        False when this node does not hold it (it was never ours, or is acknowledged)."""
        held = self.held.pop(event_id, None)
        if held is None:
            return False
        self._background(_ack(held.msg))
        room = self._room.get(held.partition)
        if room is not None:
            room.set()
        return True

    def hand_back(self, target: Address) -> None:
        """Refuse (nak) the held events of one instance: they are delivered again."""
        for event_id in [i for i, h in self.held.items() if h.target == target]:
            self._background(_nak(self.held.pop(event_id).msg))

    def holds(self, event_id: str) -> bool:
        return event_id in self.held

    async def keep_alive(self) -> None:
        """Every third of the ack wait, `in_progress` for each message held: the server
        redelivers only what a dead (or paused) owner held."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            for held in list(self.held.values()):
                with contextlib.suppress(nats.errors.Error):
                    await held.msg.in_progress()

    async def close(self) -> None:
        for partition in list(self._loops):
            await self._stop_loop(partition)
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- pulling ---------------------------------------------------------------------------

    async def _subscribe(self, partition: int) -> JetStreamContext.PullSubscription:
        """The partition's consumer, looked up (created if missing) and bound. A consumer
        whose leader is gone (a NATS server killed, cut or paused) answers nothing: each
        attempt is bounded by half the lease TTL and asked again, so the consumer starts as
        soon as JetStream elected its new leader, not after the JetStream API's timeout
        (docs/cluster.md "Faults"). The lease stays held meanwhile; a refusal is raised."""
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(self.ttl / 2):
                    return await self._bind(partition)
            except _UNANSWERED as exc:
                _raise_if_cancelled()
                pause = backoff.delay(attempt, first=START_RETRY, cap=self.ttl / 2)
                if attempt == 0:  # one line per start, not one per try while NATS is out
                    log.warning("consumer_start_retried", partition=partition,
                                error=type(exc).__name__)  # fmt: skip
                await asyncio.sleep(pause)
                attempt += 1

    async def _bind(self, partition: int) -> JetStreamContext.PullSubscription:
        js, names = self.nats.js, self.nats.names
        durable = names.consumer(partition)
        config = ConsumerConfig(
            durable_name=durable, filter_subject=names.ingress_filter(partition),
            ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.ttl, max_ack_pending=4 * MAX_INFLIGHT, max_deliver=-1,
        )  # fmt: skip
        try:
            await js.consumer_info(names.ingress_stream, durable)
        except nats.js.errors.NotFoundError:
            await js.add_consumer(names.ingress_stream, config)
        return await js.pull_subscribe_bind(durable=durable, stream=names.ingress_stream)

    async def _pull(self, partition: int, sub: JetStreamContext.PullSubscription) -> None:
        """Idle, one message is long-polled for: nats-py's fetch of a batch, once nothing is
        waiting, holds the first message that comes until the batch is full or the wait is
        over (up to FETCH_WAIT of latency on a quiet partition). Busy, a batch is taken of
        what is waiting, with a short wait."""
        room = self._room[partition]
        busy = False
        try:
            while True:
                _raise_if_cancelled()  # each retry below may have swallowed a cancellation
                free = MAX_INFLIGHT - self.count(partition)
                if free <= 0:
                    room.clear()
                    await room.wait()
                    continue
                batch = min(free, FETCH_BATCH) if busy else 1
                try:
                    msgs = await sub.fetch(batch=batch, timeout=BUSY_WAIT if busy else FETCH_WAIT)
                except (TimeoutError, nats.errors.TimeoutError):
                    busy = False
                    continue
                except nats.errors.Error as exc:  # reconnecting, a consumer leader election
                    log.warning("fetch_failed", partition=partition, error=type(exc).__name__)
                    await asyncio.sleep(0.2)
                    continue
                except Exception:  # a dead loop would hold the lease and pull nothing
                    log.exception("fetch_raised", partition=partition)
                    await asyncio.sleep(0.2)
                    continue
                busy = len(msgs) > 0
                for msg in msgs:
                    self._take(partition, msg)
        finally:
            # bounded: the loop is being stopped, and a server that does not answer (paused,
            # cut) must not hold the stop (or an event loop's close) forever
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                async with asyncio.timeout(self.ttl / 2):
                    await sub.unsubscribe()

    def _take(self, partition: int, msg: Msg) -> None:
        try:
            envelope = decode_envelope(msg.data)
            target = parse_address(envelope.target)
        except (msgspec.DecodeError, ProtocolError) as exc:
            log.error("ingress_message_unreadable", partition=partition, error=str(exc)[:200])
            self._background(_term(msg))  # never deliverable: do not let it block others
            return
        event_id = envelope.event.id
        earlier = self.held.get(event_id)
        if earlier is not None:  # delivered again while we still hold it
            earlier.msg = msg
            return
        self.held[event_id] = Held(msg, partition, target)
        delivered = msg.metadata.num_delivered
        if delivered > 1:
            log.info("event_redelivered", event_id=event_id, target=envelope.target,
                     partition=partition, deliveries=delivered)  # fmt: skip
        self.deliver(envelope, target)

    async def _stop_loop(self, partition: int) -> None:
        task = self._loops.pop(partition, None)
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _forget(self, partition: int, *, hand_over: bool = False) -> None:
        """Drop the handles of a partition that is no longer ours: the next owner gets its
        messages again (unacknowledged), we never acknowledge them. Handing over (a release),
        they are refused now so the next owner need not wait for the ack wait to run out."""
        for event_id in [i for i, h in self.held.items() if h.partition == partition]:
            held = self.held.pop(event_id)
            if hand_over:
                self._background(_nak(held.msg))
        self._room.pop(partition, None)

    def _background(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _raise_if_cancelled() -> None:
    """A loop that retries on errors must still end when its task is cancelled: nats-py turns
    a cancellation of `next_msg` into ConnectionClosedError once its connection is closed, which
    leaves the task cancelling, and the loop went on every 0.2 s forever (seen: an event loop's
    close waiting on a pull loop whose connection was closed first)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def _ack(msg: Msg) -> None:
    with contextlib.suppress(nats.errors.Error):
        await msg.ack()


async def _nak(msg: Msg) -> None:
    with contextlib.suppress(nats.errors.Error):
        await msg.nak()


async def _term(msg: Msg) -> None:
    with contextlib.suppress(nats.errors.Error):
        await msg.term()
