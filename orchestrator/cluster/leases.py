"""Partition leases: which node owns which partition, in the `leases` KV bucket.

Every `ttl/3` seconds a node renews each lease it holds with `update(last=revision)`
(compare-and-set: a lease someone else took cannot be renewed), on a cadence of its own, and
in a tick
1. beats: puts its record in the `nodes` bucket (entries expire after `ttl`: a dead node
   leaves the live set by itself);
2. plans: rendezvous hashing over the live, not draining nodes (`names.plan`);
3. releases gracefully the ones the plan gives away (the partition handler finishes its work
   first, then `delete(last=revision)`), and takes the ones the plan gives it with `create`
   (fails while another node's lease lives).

A lease is trusted locally only until `sent + ttl - margin`, where `sent` is the moment the
renewal that succeeded was sent (the server's own TTL counts from later). A node paused past
that (SIGSTOP, a long GC, a frozen VM) finds, before anything else, that it lost every lease
it held and drops the partitions' work at once (`PartitionHandler.lost`); the history
stream's sequence check fences any write it had already started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import nats.errors
import nats.js.errors
import structlog

from orchestrator.cluster.link import WRONG_LAST, Nats
from orchestrator.cluster.names import plan, token
from orchestrator.cluster.stuck_bucket import StuckBucket
from protocol.errors import ErrorCode

log = structlog.get_logger("goondan.cluster.leases")
TAKES_PER_TICK = 16
"""Partitions taken in one tick: each starts a consumer (a Raft operation in JetStream), and a
tick that takes all 64 of a fresh swarm at once outlived the TTL on a busy machine."""


class PartitionHandler(Protocol):
    async def gained(self, partition: int) -> None:
        """The lease is ours: start consuming the partition."""

    async def release(self, partition: int) -> None:
        """The plan gives it away: stop taking events, finish what runs (bounded)."""

    def lost(self, partition: int) -> None:
        """The lease lapsed under us: drop its work now (another node may own it already)."""


class NodeRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node: str
    host: str
    pid: int
    started_at: float
    beat_at: float
    partitions: list[int] = msgspec.field(default_factory=list)
    live: int = 0
    draining: bool = False
    control: str = ""
    """This node's control socket, for a `goondan` command on the same machine."""


@dataclass(slots=True)
class Lease:
    revision: int
    sent: float
    """Monotonic time the renewal (or creation) that gave `revision` was sent."""


def valid(lease: Lease | None, ttl: float, now: float) -> bool:
    """Whether a lease renewed at `lease.sent` still lets this node act for its partition: its
    TTL less a margin (a sixth) for the renewal's transit."""
    return lease is not None and now < lease.sent + ttl - ttl / 6


@dataclass(slots=True)
class Tenancy:
    """What this node holds, read by its placement (where an instance may run, whether its
    history may be appended) and written by its `LeaseKeeper`: the leases it renewed, and the
    partitions it is giving away. Built first: the placement exists before the supervisor, the
    keeper after it."""

    ttl: float
    clock: Callable[[], float] = time.monotonic
    held: dict[int, Lease] = field(default_factory=dict)
    leaving: set[int] = field(default_factory=set)

    def holds(self, partition: int) -> bool:
        return valid(self.held.get(partition), self.ttl, self.clock())

    def admits(self, partition: int) -> bool:
        """Whether a new activation may start here: held, and not being given away."""
        return self.holds(partition) and partition not in self.leaving


@dataclass(slots=True)
class LeaseKeeper:
    nats: Nats
    node: str
    partitions: int
    ttl: float
    handler: PartitionHandler
    live_count: Callable[[], int] = lambda: 0
    control: str = ""
    asked_to_drain: Callable[[], Awaitable[bool]] | None = None
    """Whether `goondan cluster drain` asked this node to give its partitions away."""
    clock: Callable[[], float] = time.monotonic
    held: dict[int, Lease] = field(default_factory=dict)
    nodes_stuck: StuckBucket | None = None
    """Told of each beat: makes the `nodes` bucket again when its stream is stuck."""
    leases_stuck: StuckBucket | None = None
    """Told of each lease taken or renewed: makes the `leases` bucket again when its stream is
    stuck."""
    draining: bool = False
    started_at: float = field(default_factory=time.time)
    live_nodes: list[str] = field(default_factory=list)
    releasing: set[int] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _gaining: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    """Partitions whose handler is still starting (a consumer to create): off the tick, so a
    slow start never keeps the leases from being renewed."""
    _renewing: dict[int, asyncio.Event] = field(default_factory=dict)
    """Renewals on their way: a release waits for its partition's (it would move the revision
    the release deletes by, and the lease would wait out its TTL instead)."""
    _settled_for: list[str] | None = None
    _shaken_at: float | None = None
    """When a tick last failed (None: not within a TTL of working ticks)."""
    _before_outage: list[str] = field(default_factory=list)
    """The live nodes as listed before the ticks began to fail."""
    """The live nodes when this node last held exactly what the plan gives it."""

    @property
    def margin(self) -> float:
        return self.ttl / 6

    @property
    def interval(self) -> float:
        return self.ttl / 3

    def holds(self, partition: int) -> bool:
        """Whether this node may act for `partition` now (its lease is valid locally)."""
        return valid(self.held.get(partition), self.ttl, self.clock())

    def drain(self) -> None:
        """Give every partition away (`goondan cluster drain`): the others stop counting us."""
        self.draining = True
        self._wake.set()

    async def run(self) -> None:
        watch = asyncio.ensure_future(self._watch_lapses())
        renewals = asyncio.ensure_future(self._renewals())
        try:
            await self._ticks()
        finally:
            watch.cancel()
            renewals.cancel()
            for starting in self._gaining.values():
                starting.cancel()
            for stuck in (self.nodes_stuck, self.leases_stuck):
                if stuck is not None:
                    stuck.stop()

    async def _watch_lapses(self) -> None:
        """A lease lapses on time even while a tick waits on NATS (an election, a reconnect):
        this node stops acting for it at once."""
        while True:
            await asyncio.sleep(self.margin / 2)
            self._drop_lapsed()

    async def _ticks(self) -> None:
        while True:
            self._wake.clear()  # a wake-up asked during the tick starts the next one at once
            try:
                async with asyncio.timeout(self.ttl):
                    await self.tick()
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                # NATS unreachable (a leader election, a reconnect): leases lapse on their own
                log.warning("lease_tick_failed", error=type(exc).__name__)
                if self._shaken_at is None:
                    self._before_outage = list(self.live_nodes)
                self._shaken_at = self.clock()
                self._drop_lapsed()
            try:
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def tick(self) -> None:
        self._drop_lapsed()
        nodes, want = await self._plan()
        for p in [p for p in self.held if p not in want and p not in self.releasing]:
            self.releasing.add(p)
            task = asyncio.ensure_future(self._release(p))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        settled = set(self.held) == want and not self.releasing
        if settled and self._settled_for != nodes:
            log.info("cluster_settled", nodes=len(nodes), partitions=len(want))
        self._settled_for = nodes if settled else None

    async def _plan(self) -> tuple[list[str], set[int]]:
        """Beat, read the live nodes, take (some of) the partitions the plan gives this node
        that it lacks; the live nodes and the partitions it wants."""
        if not self.draining and self.asked_to_drain is not None and await self.asked_to_drain():
            log.warning("cluster_draining", node=self.node, partitions=len(self.held))
            self.draining = True
        await self._beat()
        nodes = self._with_absent_peers(await self._live_nodes())
        self.live_nodes = nodes
        owners = plan(self.partitions, [] if self.draining else nodes)
        want = {p for p, n in owners.items() if n == self.node}
        missing = sorted(p for p in want if p not in self.held)
        await asyncio.gather(*(self._take(p) for p in missing[:TAKES_PER_TICK]))
        if len(missing) > TAKES_PER_TICK:
            self._wake.set()  # the rest at once, in the next tick (after renewing these)
        return nodes, want

    async def _renewals(self) -> None:
        """Every `interval`, each held lease renewed, on a cadence of its own: not behind the
        tick's beat and node listing. A heal that re-elects JetStream's leaders leaves the
        `nodes` bucket's stream (which a beat and a key listing need) without a leader for
        seconds while the `leases` stream already takes writes; renewals queued behind them
        let every lease lapse and every partition move (docs/cluster.md "Faults")."""
        while True:
            try:
                async with asyncio.timeout(self.ttl):
                    await self._renew_held()
            except TimeoutError:
                log.warning("lease_renewals_failed", error="TimeoutError", held=len(self.held))
            await asyncio.sleep(self.interval)

    async def _renew_held(self) -> None:
        """Each held lease renewed on its own: one that fails (NATS without an answer) lapses
        on time (`_drop_lapsed`), the others are kept. A lapsed one is dropped first, never
        renewed: a node back from a pause stops acting for it before anything else."""
        self._drop_lapsed()
        held = list(self.held)
        results = await asyncio.gather(*(self._renew(p) for p in held), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for error in failed:
            if not isinstance(error, nats.errors.Error | TimeoutError | OSError):
                raise error
        if failed:
            log.warning("lease_renewals_failed", failed=len(failed), held=len(held),
                        error=type(failed[0]).__name__)  # fmt: skip

    def _drop_lapsed(self) -> None:
        now = self.clock()
        for p, lease in list(self.held.items()):
            if now >= lease.sent + self.ttl - self.margin:
                del self.held[p]
                log.warning("lease_lapsed", partition=p, late=round(now - lease.sent, 3))
                self._lose(p)

    async def _beat(self) -> None:
        record = NodeRecord(
            node=self.node, host=socket.gethostname(), pid=os.getpid(),
            started_at=self.started_at, beat_at=time.time(), partitions=sorted(self.held),
            live=self.live_count(), draining=self.draining, control=self.control,
        )  # fmt: skip
        async with _told(self.nodes_stuck):
            await self.nats.nodes.put(token(self.node), msgspec.json.encode(record))

    def _with_absent_peers(self, listed: list[str]) -> list[str]:
        """For a TTL after this node's last failed tick, the nodes live before the failures
        are planned with even when their records are missing: an outage of NATS let every
        record expire, and the first node whose listing worked again saw only itself, took
        every partition and handed most back a tick later, each move an activation read
        from the history stream (docs/cluster.md "Faults"). A peer that is alive beats again
        within that TTL; one that died meanwhile is left out a TTL later."""
        if self._shaken_at is None:
            return listed
        if self.clock() - self._shaken_at >= self.ttl:
            self._shaken_at = None
            return listed
        absent = sorted(set(self._before_outage) - set(listed))
        if absent and not self.draining:
            log.info("absent_nodes_kept", nodes=absent)
            return sorted({*listed, *absent})
        return listed

    async def _live_nodes(self) -> list[str]:
        records = await nodes_of(self.nats)
        live = {r.node for r in records if not r.draining}
        if not self.draining:
            # our own record was just written; a read that misses it must not make us plan
            # without ourselves and release every partition for a tick (seen under load while
            # keys were read with nats-py's KeyValue.keys(), which drops keys under writes)
            live.add(self.node)
        return sorted(live)

    async def _renew(self, p: int) -> None:
        lease = self.held.get(p)
        if lease is None:
            return
        self._renewing[p] = done = asyncio.Event()
        try:
            await self._renew_lease(p, lease)
        finally:
            del self._renewing[p]
            done.set()

    async def _renew_lease(self, p: int, lease: Lease) -> None:
        sent = self.clock()
        key = self.nats.names.lease_key(p)
        try:
            async with _told(self.leases_stuck):
                revision = await self.nats.leases.update(key, self.node.encode(),
                                                         last=lease.revision)  # fmt: skip
        except nats.js.errors.KeyWrongLastSequenceError:
            if self.held.pop(p, None) is not None:
                log.warning("lease_taken", partition=p)
                self._lose(p)
            return
        if p not in self.held:
            return  # lapsed while the renewal was on its way: dropped already
        self.held[p] = Lease(revision, sent)

    async def _take(self, p: int) -> None:
        sent = self.clock()
        key = self.nats.names.lease_key(p)
        try:
            async with _told(self.leases_stuck):
                revision = await self.nats.leases.create(key, self.node.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            return  # another node's lease still lives: it expires or is released
        if self.clock() >= sent + self.ttl - self.margin:
            return  # the create took too long to trust the lease: the next tick renews
        self.held[p] = Lease(revision, sent)
        log.info("partition_gained", partition=p)
        self._gaining[p] = asyncio.ensure_future(self._gain(p))

    async def _gain(self, p: int) -> None:
        try:
            await self.handler.gained(p)
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            # no consumer: give the lease up, the next tick (or another node) takes it again
            log.warning("partition_start_failed", partition=p, error=type(exc).__name__)
            if self.held.pop(p, None) is not None:
                self.handler.lost(p)
        finally:
            self._gaining.pop(p, None)

    def _lose(self, p: int) -> None:
        starting = self._gaining.pop(p, None)
        if starting is not None:
            starting.cancel()
        self.handler.lost(p)

    async def _release(self, p: int) -> None:
        try:
            starting = self._gaining.get(p)
            if starting is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            await self.handler.release(p)
            renewing = self._renewing.get(p)
            if renewing is not None:
                await renewing.wait()
            lease = self.held.pop(p, None)
            if lease is not None:
                await self._give_up(p, lease)
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            # the lease lapses after its TTL and another node takes the partition then
            log.warning("lease_not_released", partition=p, error=type(exc).__name__)
        finally:
            self.releasing.discard(p)
            self._wake.set()

    async def _give_up(self, p: int, lease: Lease) -> None:
        key = self.nats.names.lease_key(p)
        try:
            await self.nats.leases.delete(key, last=lease.revision)
        except nats.js.errors.APIError as exc:
            if exc.err_code not in WRONG_LAST:
                raise
            # it lapsed and was taken (or renewed by a retried write) meanwhile: what the key
            # holds is not ours to delete
            log.info("partition_released", partition=p, lease="moved")
            return
        log.info("partition_released", partition=p)

    async def release_all(self) -> None:
        """At a graceful stop: hand every partition over now instead of after the TTL."""
        self.draining = True
        mine = [p for p in self.held if p not in self.releasing]
        self.releasing.update(mine)
        await asyncio.gather(*(self._release(p) for p in mine))
        with contextlib.suppress(nats.errors.Error, nats.js.errors.KeyWrongLastSequenceError):
            await self.nats.nodes.delete(token(self.node))


@contextlib.asynccontextmanager
async def _told(stuck: StuckBucket | None) -> AsyncIterator[None]:
    """Tells `stuck` whether the write in the block was answered: a refused compare-and-set
    was (a leader refused it); anything else, a cancellation by a timeout included, was not."""
    if stuck is None:
        yield
        return
    try:
        yield
    except nats.js.errors.KeyWrongLastSequenceError:
        stuck.ok()
        raise
    except BaseException:
        stuck.failed()
        raise
    stuck.ok()


async def nodes_of(nats_: Nats) -> list[NodeRecord]:
    """The live nodes' records (their entries expire with the lease TTL). A record counts only
    under its own node's key: with a NATS user per node the server lets each node write that
    key alone, so a node cannot register as another by naming it in a record of its own."""
    records = []
    for key, value in (await nats_.entries("nodes")).items():
        try:
            record = msgspec.json.decode(value, type=NodeRecord)
        except msgspec.DecodeError:
            log.warning("node_record_unreadable", key=key[:200])
            continue
        if key != token(record.node):
            log.warning("node_record_misplaced", code=ErrorCode.E_CLUSTER_NODE_UNKNOWN,
                        key=key[:200], node=record.node[:200])  # fmt: skip
            continue
        records.append(record)
    return records


async def owners_of(nats_: Nats, partitions: int) -> dict[int, str]:
    """Partition -> the node whose lease holds it now. Keys other than `p.<partition>` are left
    out: a node may write any key of the bucket's shapes (docs/cluster.md),
    and one it should not have written must not break every node's `cluster status`."""
    owners = {}
    for key, value in (await nats_.entries("leases")).items():
        head, _, number = key.partition(".")
        if head == "p" and number.isdigit() and int(number) < partitions:
            owners[int(number)] = value.decode(errors="replace")
    return owners
