"""Spawn, watch, drain and kill children; apply the crash policy and deadlines.

The supervisor owns every status change of the process table. It is told about frames by
the router (through the `Lifecycle` hooks) and about deaths by the spawner's pidfd watch,
so a crash is handled the moment the kernel reports it, not at the next reconcile tick. It
reads the mailboxes it shares with the router, and tells the routing side what became of a
process through `Deliveries` (orchestrator/supervision/ports.py); where an instance may run is
its `Placement`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

import structlog

from orchestrator.supervision import capacity, reasons
from orchestrator.supervision.exits import drop_empty_log, record_exit
from orchestrator.supervision.mailboxes import Mailboxes
from orchestrator.supervision.policy import (
    ExitKind,
    HoldDown,
    RespawnAfter,
    RespawnNow,
    RestartHistory,
    decide,
)
from orchestrator.supervision.ports import Deliveries, Placement
from orchestrator.supervision.settings import Settings
from orchestrator.supervision.spawner import ChildHandle, ChildSpec, ExitStatus, Spawner, SpawnError
from orchestrator.supervision.states import DOWN, ProcessStatus
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from orchestrator.supervision.trees import remove_tree
from orchestrator.swarm.view import CurrentSwarm
from protocol.control import StopReport
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.ids import ORCHESTRATOR, Address, ProcessKind
from protocol.jsontypes import JsonObject
from protocol.launch import ChildLaunch, LaunchSettings
from protocol.messages import (
    FEATURE_HISTORY,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ChildState,
    HelloPayload,
    ReadyPayload,
    Shutdown,
    ShutdownAckPayload,
    ShutdownPayload,
    ShutdownReason,
    StartErrorPayload,
    StatusPayload,
    TurnOutcome,
)

S = ProcessStatus
T = TypeVar("T")
log = structlog.get_logger("goondan.supervisor")
ReadyListener = Callable[[ProcessEntry, list[str]], None]
"""Told the tools a process declared at `ready` (the metrics' tool label values)."""


def _no_listener(entry: ProcessEntry, tools: list[str]) -> None:
    return None


class RestartListener(Protocol):
    """Told around each `Supervisor.restart` (`goondan restart`), e.g. to tell systemd."""

    def restart_started(self) -> None: ...
    def restart_finished(self) -> None: ...


class Supervisor:
    def __init__(
        self,
        *,
        table: ProcessTable,
        mailboxes: Mailboxes,
        deliveries: Deliveries,
        placement: Placement,
        spawner: Spawner,
        settings: Settings,
        launch: LaunchSettings,
        layout: StateLayout,
        swarm: CurrentSwarm,
        clock: Callable[[], float] = time.monotonic,
        ready_listener: ReadyListener = _no_listener,
    ) -> None:
        self.placement = placement
        """Whether an instance may run here, and its files before its process starts."""
        self.table = table
        self.mailboxes = mailboxes
        self.deliveries = deliveries
        self.spawner = spawner
        self.settings = settings
        self.launch = launch
        self.layout = layout
        self.swarm = swarm
        self.clock = clock
        self.closing = False
        self.forced = False
        """A second signal forced the stop: every process still draining is killed."""
        self._handles: dict[Address, ChildHandle] = {}
        self._exited: dict[Address, asyncio.Event] = {}
        self._timers: dict[Address, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._restart_listeners: list[RestartListener] = []
        self._deactivation_listeners: list[Callable[[Address], None]] = []
        self._start_error_listeners: list[Callable[[ProcessEntry, ErrorInfo], None]] = []
        self.ready_listener = ready_listener
        self.capacity = capacity.Capacity(settings.max_live_instances, table, mailboxes.get)

    def add_restart_listener(self, listener: RestartListener) -> None:
        self._restart_listeners.append(listener)

    # -- routing questions -------------------------------------------------------------

    def check_target(self, target: Address, *, request: bool = False) -> ErrorInfo | None:
        """Why an event for `target` cannot be taken now (None: it can).

        A request for an agent in crashLoopBackOff is answered at once rather than left
        waiting for a process that keeps dying; plain events stay queued for it."""
        entry = self.table.get(target)
        if request and entry is not None and entry.status is S.CRASH_LOOP_BACKOFF:
            return self._backing_off(entry)
        if self.closing:
            return reasons.shutting_down()
        members = self.swarm.view.members
        if target.kind is ProcessKind.AGENT and target.name not in members:
            return ErrorInfo(
                code=ErrorCode.E_AGENT_NOT_IN_SWARM,
                message=f"agent {target.name!r} is not in swarm {self.launch.swarm!r}",
                suggestion=f"use one of: {', '.join(sorted(members))}",
            )
        return None

    def ensure(self, target: Address) -> None:
        """Spawn `target` on demand unless it is live, backing off, or held down."""
        entry = self.table.entry(target)
        if entry.status is not S.TERMINATED or self.closing:
            return
        if not self.placement.admits(target):
            return  # cluster mode: another node owns it (or this one is handing it over)
        if entry.retry_at is not None and self.clock() < entry.retry_at:
            self.deliveries.fail_queued(target, reasons.start_failed(entry))
            return
        if target.kind is ProcessKind.AGENT and not self._admit(entry):
            return
        self._spawn(entry)

    def _admit(self, entry: ProcessEntry) -> bool:
        """Whether `entry` may start now (orchestrator/supervision/capacity.py decides)."""
        match capacity.decide(self.capacity, entry.address):
            case capacity.Admitted():
                return True
            case capacity.Evict(victim=victim):
                log.info("instance_evicted", process=victim.id_text, for_=str(entry.address))
                self.deactivate(victim)
            case capacity.Busy(error=error):
                self.deliveries.fail_queued(entry.address, error, requests_only=True)
        return False

    def _admit_waiting(self) -> None:
        """A slot may have freed (an exit, an instance gone idle): start who waits first."""
        for address in list(self.capacity.waiting):
            entry = self.table.get(address)
            if entry is None or entry.status is not S.TERMINATED:
                self.capacity.waiting.pop(address, None)
                continue
            if not self.capacity.room() and self.capacity.victim() is None:
                return
            self.ensure(address)
            if address in self.capacity.waiting:
                return  # still no room: the rest keep their turn

    # -- spawning ----------------------------------------------------------------------

    def _spawn(self, entry: ProcessEntry) -> None:
        if entry.ever_started and not entry.deactivated:
            entry.restarts += 1  # a reactivation is not a restart: nothing went wrong
        entry.ever_started = True
        entry.generation += 1
        entry.nonce = secrets.token_hex(16)
        entry.protocol = 0
        entry.pid = None
        entry.start_error = None
        entry.retry_at = None
        entry.deactivated = False
        entry.killed = False
        entry.handing_over = False
        entry.spawned_at = self.clock()
        self._exited[entry.address] = asyncio.Event()
        # terminated | crashed | crashLoopBackOff -> spawning
        self.table.transition(entry, S.SPAWNING, expect=DOWN)
        self._task(self._launch(entry, entry.generation))

    def _task(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _launch(self, entry: ProcessEntry, generation: int) -> None:
        pid = entry.address.with_generation(generation)
        spec = ChildSpec(
            launch=ChildLaunch(process=pid, settings=self.launch, nonce=entry.nonce),
            log_path=self.layout.process_log(self.launch.swarm, pid.name, pid.instance_key),
        )
        try:
            await self.placement.prepare(entry.address)
            handle = await self.spawner.spawn(spec)
        except (SpawnError, OSError) as exc:  # OSError: e.g. the log directory is not writable
            log.error("spawn_failed", process=str(pid), error=str(exc))
            self._on_exit(entry, generation, ExitStatus(code=None, signal=None, at=time.time()))
            return
        if entry.generation != generation:
            handle.kill()
            return
        self._handles[entry.address] = handle
        entry.pid = handle.pid
        self.table.pid_started(handle.pid)
        log.info("spawned", process=str(pid), pid=handle.pid, mode=self.spawner.mode)
        handle.exited.add_done_callback(lambda _f: self._on_exit(entry, generation, None))
        if entry.status is S.DRAINING:  # stopped while the fork was on its way
            handle.send_signal(signal.SIGTERM)

    # -- deaths ------------------------------------------------------------------------

    def _on_exit(self, entry: ProcessEntry, generation: int, known: ExitStatus | None) -> None:
        if entry.generation != generation or not entry.live:
            return
        handle = self._handles.pop(entry.address, None)
        how = "exited" if known is None else known.describe()
        if entry.pid is not None:
            self.table.pid_gone(entry.pid)
        record_exit(entry, handle, known)
        key = entry.address.instance_key
        drop_empty_log(self.layout.process_log(self.launch.swarm, entry.address.name, key))
        self.deliveries.on_process_dead(entry, how, stopping=self.closing or entry.handing_over)
        exited = self._exited.pop(entry.address, None)  # whoever waits holds it already
        if exited is not None:
            exited.set()
        if entry.status is S.DRAINING:
            # draining -> terminated: we asked it to stop
            self.table.transition(entry, S.TERMINATED, expect=S.DRAINING)
            if entry.deactivated:
                for listener in self._deactivation_listeners:
                    listener(entry.address)
            if not self.closing:
                self._admit_waiting()
                box = self.mailboxes.get(entry.address)
                if box is not None and box.queue:
                    self.ensure(entry.address)
            return
        # spawning | idle | processing -> crashed
        self.table.transition(entry, S.CRASHED, expect=(S.SPAWNING, S.IDLE, S.PROCESSING))
        self._after_crash(entry)

    def _after_crash(self, entry: ProcessEntry) -> None:
        if self.closing:
            self.table.transition(entry, S.TERMINATED, expect=S.CRASHED)  # crashed -> terminated
            return
        if entry.start_error is not None:
            kind = ExitKind.START_ERROR
            entry.start_errors += 1
        else:
            kind = ExitKind.CRASH
            entry.crashes += 1
        history = RestartHistory(crashes=entry.crashes, start_errors=entry.start_errors)
        decision = decide(history, kind, self.settings.restart)
        log.warning(
            "crashed", process=str(entry.process_id), kind=str(kind), decision=repr(decision)
        )
        match decision:
            case RespawnNow():
                self._spawn(entry)  # crashed -> spawning
            case RespawnAfter(delay=delay):
                self.table.transition(entry, S.CRASH_LOOP_BACKOFF, expect=S.CRASHED)
                entry.retry_at = self.clock() + delay
                loop = asyncio.get_running_loop()
                self._timers[entry.address] = loop.call_later(
                    delay, self._backoff_over, entry, entry.generation
                )
                backing_off = self._backing_off(entry)
                self.deliveries.fail_queued(entry.address, backing_off, requests_only=True)
            case HoldDown(retry_after=retry_after):
                self.table.transition(entry, S.TERMINATED, expect=S.CRASHED)
                entry.retry_at = self.clock() + retry_after
                self.deliveries.fail_queued(entry.address, reasons.start_failed(entry))

    def _backoff_over(self, entry: ProcessEntry, generation: int) -> None:
        self._timers.pop(entry.address, None)
        current = entry.generation == generation and entry.status is S.CRASH_LOOP_BACKOFF
        if current and not self.closing:
            self._spawn(entry)  # crashLoopBackOff -> spawning

    def respawn_if_due(self, entry: ProcessEntry) -> None:
        """The reconciler's safety net for a backoff whose timer was lost."""
        if entry.status is S.CRASH_LOOP_BACKOFF and entry.address not in self._timers:
            self._backoff_over(entry, entry.generation)

    def _backing_off(self, entry: ProcessEntry) -> ErrorInfo:
        key, name = entry.address.instance_key, entry.address.name
        log_file = self.layout.process_log(self.launch.swarm, name, key)
        return reasons.backing_off(entry, self.clock(), str(log_file))

    # -- frames from children (router.Lifecycle) ---------------------------------------

    def on_hello(self, entry: ProcessEntry, payload: HelloPayload) -> None:
        if entry.pid is not None and payload.pid != entry.pid:
            # the spawn's secret in another process: never serve it
            log.warning("hello_foreign_pid", process=entry.id_text, spawned=entry.pid,
                        said=payload.pid)  # fmt: skip
            entry.start_error = ErrorInfo(code=ErrorCode.E_PROTOCOL_VERSION,
                                          message=f"hello from pid {payload.pid}, not the "
                                          f"spawned {entry.pid}")  # fmt: skip
            handle = self._handles.get(entry.address)
            if handle is not None:
                handle.kill()
            return
        if self.launch.history_frames and FEATURE_HISTORY not in payload.features:
            entry.start_error = ErrorInfo(
                code=ErrorCode.E_PROTOCOL_VERSION,
                message="cluster mode needs children that send history frames; this one "
                "does not (an older goondan?)",
            )
            handle = self._handles.get(entry.address)
            if handle is not None:
                handle.kill()
            return
        entry.protocol = payload.protocol_version  # what it reads: `delta` frames from 2 on
        if not MIN_PROTOCOL_VERSION <= payload.protocol_version <= PROTOCOL_VERSION:
            entry.start_error = ErrorInfo(
                code=ErrorCode.E_PROTOCOL_VERSION,
                message=f"child speaks protocol {payload.protocol_version}, "
                f"we speak {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}",
            )
            handle = self._handles.get(entry.address)
            if handle is not None:
                handle.kill()

    def on_ready(self, entry: ProcessEntry, payload: ReadyPayload) -> None:
        if entry.status is S.DRAINING:
            self._send_shutdown(entry, ShutdownReason.ORCHESTRATOR_SHUTDOWN)
            return
        self.table.transition(entry, S.IDLE, expect=S.SPAWNING)  # spawning -> idle
        entry.start_errors = 0
        log.info("ready", process=str(entry.process_id), pid=payload.pid, tools=len(payload.tools))
        self.ready_listener(entry, payload.tools)
        self.deliveries.flush(entry.address)

    def on_start_error(self, entry: ProcessEntry, payload: StartErrorPayload) -> None:
        entry.start_error = payload.error
        log.error("start_error", process=str(entry.process_id), code=payload.error.code,
                  message=payload.error.message)  # fmt: skip
        for listener in self._start_error_listeners:
            listener(entry, payload.error)

    def on_status(self, entry: ProcessEntry, payload: StatusPayload) -> None:
        if payload.state is ChildState.PROCESSING and entry.status is S.IDLE:
            self.table.transition(entry, S.PROCESSING, expect=S.IDLE)  # idle -> processing
        elif payload.state is ChildState.IDLE and entry.status is S.PROCESSING:
            self.table.transition(entry, S.IDLE, expect=S.PROCESSING)  # processing -> idle
            if self.capacity.waiting:
                self._admit_waiting()  # it can be stopped for one that waits
        if payload.last_turn is TurnOutcome.COMPLETED:
            entry.crashes = 0

    def on_shutdown_ack(self, entry: ProcessEntry, payload: ShutdownAckPayload) -> None:
        log.info("shutdown_ack", process=str(entry.process_id),
                 undelivered=len(payload.undelivered_events))  # fmt: skip

    # -- stopping ----------------------------------------------------------------------

    def _send_shutdown(self, entry: ProcessEntry, reason: ShutdownReason) -> None:
        grace_ms = int(self.settings.grace_period * 1000)
        payload = ShutdownPayload(grace_period_ms=grace_ms, reason=reason)
        shutdown = Shutdown(from_=ORCHESTRATOR, to=entry.id_text, payload=payload)
        if not self.deliveries.send(entry, shutdown):
            handle = self._handles.get(entry.address)
            if handle is not None:
                handle.send_signal(signal.SIGTERM)

    async def stop(
        self, entry: ProcessEntry, reason: ShutdownReason, *, hand_over: bool = False
    ) -> bool:
        """shutdown -> wait for exit up to the grace period -> SIGKILL. True when it was
        killed (the grace period ran out, or a second signal forced the stop). `hand_over`:
        the instance goes to another node, which runs a turn the stop cuts again."""
        if not entry.live:
            return False
        entry.handing_over = hand_over
        self._begin_stop(entry, reason)
        exited = self._exited[entry.address]
        try:
            async with asyncio.timeout(self.settings.grace_period):
                await exited.wait()
        except TimeoutError:
            log.warning("grace_period_over", process=str(entry.process_id), action="SIGKILL")
            while not exited.is_set():
                handle = self._handles.get(entry.address)
                if handle is not None:
                    handle.kill()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await exited.wait()
            return True
        return self.forced

    # -- virtual actors: deactivation (orchestrator/supervision/hibernation.py) --------------------

    def _begin_stop(self, entry: ProcessEntry, reason: ShutdownReason) -> None:
        """A stop's first step, at once: draining (so the live bound counts the slot as
        leaving before anyone else decides), then the shutdown frame."""
        if entry.status is not S.DRAINING:
            # spawning | idle | processing -> draining
            self.table.transition(entry, S.DRAINING, expect=(S.SPAWNING, S.IDLE, S.PROCESSING))
            if entry.address in self._handles:
                self._send_shutdown(entry, reason)

    def deactivate(self, entry: ProcessEntry) -> asyncio.Future[bool]:
        """Stop the live agent instance of `entry` so that it comes back on its next event:
        the idle timeout, room made at the live bound, or a caller that moves it elsewhere.
        Its state is its files; `goondan status` shows it `deactivated`. It is draining when
        this returns; the future says whether it had to be killed (see `stop`)."""
        if entry.live and entry.status is not S.DRAINING:  # a stop under way keeps its reason
            entry.deactivated = True
            self._begin_stop(entry, ShutdownReason.IDLE)
        return self._task(self.stop(entry, ShutdownReason.IDLE))

    def add_start_error_listener(self, listener: Callable[[ProcessEntry, ErrorInfo], None]) -> None:
        """Told when a child says why it cannot start (before the crash policy retries it)."""
        self._start_error_listeners.append(listener)

    def add_deactivation_listener(self, listener: Callable[[Address], None]) -> None:
        """Told when a deactivated instance's process has exited (its files are final)."""
        self._deactivation_listeners.append(listener)

    async def shutdown_all(self) -> StopReport:
        """Stop every child in parallel; nothing respawns from now on. Queued events that
        are journaled stay open for the next start (orchestrator/supervision/stopping.py)."""
        self.closing = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        report = StopReport(grace_seconds=self.settings.grace_period)
        for entry in self.table:
            if entry.status is S.CRASH_LOOP_BACKOFF:
                self.table.transition(entry, S.TERMINATED, expect=S.CRASH_LOOP_BACKOFF)
        live = self.table.live()
        ids = [str(e.process_id) for e in live]
        stops = (self.stop(e, ShutdownReason.ORCHESTRATOR_SHUTDOWN) for e in live)
        for process, killed in zip(ids, await asyncio.gather(*stops), strict=True):
            (report.killed if killed else report.drained).append(process)
        # after the stops: a stopped child hands back the events it had not started
        for entry in self.table:
            kept, dropped = self.deliveries.park_queued(entry.address)
            report.kept, report.dropped = report.kept + kept, report.dropped + dropped
        return report

    def evict(self, entry: ProcessEntry) -> None:
        """Cluster mode: the instance is another node's now. SIGKILL without a respawn (its
        events were taken from its mailbox by the caller)."""
        if not entry.live:
            return
        if entry.status is not S.DRAINING:
            # spawning | idle | processing -> draining
            self.table.transition(entry, S.DRAINING, expect=(S.SPAWNING, S.IDLE, S.PROCESSING))
        self.kill(entry)

    def kill(self, entry: ProcessEntry) -> None:
        """SIGKILL the current process of `entry`; its death is handled as a crash (the turn
        it ran is answered E_AGENT_CRASHED, not given to the next process)."""
        handle = self._handles.get(entry.address)
        if handle is not None:
            entry.killed = True
            handle.kill()

    def kill_all(self) -> None:
        """The second signal: no more waiting."""
        self.forced = True
        for handle in list(self._handles.values()):
            handle.kill()

    async def restart(
        self, agent: str | None, *, fresh: bool, instance_key: str | None = None
    ) -> list[JsonObject]:
        """Stop the matching running instances (reason restart); start new generations."""

        def pick(e: ProcessEntry) -> bool:
            return (
                e.address.kind is ProcessKind.AGENT
                and agent in (None, e.address.name)
                and instance_key in (None, e.address.instance_key)
            )

        for listener in self._restart_listeners:
            listener.restart_started()
        try:
            return await self.restart_where(pick, ShutdownReason.RESTART, fresh=fresh)
        finally:
            for listener in self._restart_listeners:
                listener.restart_finished()

    async def restart_where(
        self, pick: Callable[[ProcessEntry], bool], reason: ShutdownReason, *, fresh: bool = False
    ) -> list[JsonObject]:
        """Restart the picked running/backing-off processes (e.g. reason config_change): one
        row per process (`process`: the stopped one, `killed`, `started`: the new one)."""
        chosen = [
            e
            for e in self.table
            if pick(e) and (e.live or e.status is S.CRASH_LOOP_BACKOFF or e.retry_at is not None)
        ]
        before = [str(e.process_id) for e in chosen]
        killed = await asyncio.gather(*(self.stop(e, reason) for e in chosen))
        if fresh:  # renamed aside at once, deleted off the loop (orchestrator/supervision/trees.py)
            # history and extension state only: the workspace (workdir/) and spawn record stay;
            # deleting those is `goondan instance delete`
            swarm = self.launch.swarm
            trees = []
            for e in chosen:
                paths = self.layout.instance_paths(swarm, e.address.instance_key, e.address.name)
                trees += [paths.messages_dir, paths.extensions_dir, paths.pending_calls_dir,
                          paths.inbox_dir]  # fmt: skip
            await asyncio.gather(*(remove_tree(tree) for tree in trees))
        restarted: list[JsonObject] = []
        for entry, process, was_killed in zip(chosen, before, killed, strict=True):
            timer = self._timers.pop(entry.address, None)
            if timer is not None:
                timer.cancel()
            entry.crashes = entry.start_errors = 0
            entry.retry_at = None
            if entry.status in DOWN and not self.closing:
                self._spawn(entry)
            if entry.live:  # spawned here, or at once for the events queued behind its turn
                restarted.append({"process": process, "killed": was_killed,
                                  "started": str(entry.process_id)})  # fmt: skip
        return restarted
