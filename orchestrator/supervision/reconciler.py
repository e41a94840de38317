"""Desired vs actual, every `reconcileIntervalSeconds` (default 5 s): the safety net.

Crashes are handled when the exit is seen; this loop repairs what an event could have missed
(queued events for a stopped process, a lost backoff timer), deactivates instances idle past
`idleTimeoutSeconds` (a turn parked on a client-side call counts as idle), asks silent children
whether they are alive and kills the wedged ones (orchestrator/supervision/liveness.py), and
forgets the
oldest deactivated instances beyond what it keeps (orchestrator/supervision/hibernation.py).
`plan()` is
pure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

from orchestrator.supervision import heaptrim, hibernation, liveness
from orchestrator.supervision.liveness import KillWedged, Probe
from orchestrator.supervision.mailboxes import Mailbox
from orchestrator.supervision.settings import Settings
from orchestrator.supervision.states import READY, ProcessStatus
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry
from protocol.ids import Address, ProcessKind

S = ProcessStatus
log = structlog.get_logger("goondan.reconciler")


@dataclass(frozen=True, slots=True)
class Start:
    address: Address


@dataclass(frozen=True, slots=True)
class ResumeBackoff:
    address: Address


@dataclass(frozen=True, slots=True)
class StopIdle:
    address: Address


Intent = Start | ResumeBackoff | StopIdle | KillWedged | Probe


def _idle_for(entry: ProcessEntry, box: Mailbox | None, now: float) -> float:
    """How long `entry` has had nothing to do (0 when it has work): idle with an empty
    mailbox, or processing a turn that waits for its client with nothing queued behind it."""
    if entry.status is S.IDLE and (box is None or box.empty):
        return now - entry.changed_at
    if entry.status is S.PROCESSING and entry.parked_at is not None and not (box and box.queue):
        return now - entry.parked_at
    return 0.0


def _intent(
    entry: ProcessEntry, box: Mailbox | None, now: float, settings: Settings
) -> Intent | None:
    address = entry.address
    # connectors are always up: a stopped one is started like one with queued events
    always_up = address.kind is ProcessKind.CONNECTOR
    queued = always_up or (box is not None and bool(box.queue))
    retry_at = entry.retry_at
    if entry.status is S.TERMINATED and queued and (retry_at is None or now >= retry_at):
        return Start(address)
    if (
        entry.status is S.CRASH_LOOP_BACKOFF
        and retry_at is not None
        and now >= retry_at + settings.reconcile_interval
    ):
        return ResumeBackoff(address)
    if entry.status not in READY:
        return None
    alive = liveness.check(entry, now, settings)
    if isinstance(alive, KillWedged):
        return alive
    idle_timeout = settings.idle_timeout
    if idle_timeout is not None and not always_up and _idle_for(entry, box, now) >= idle_timeout:
        return StopIdle(address)
    return alive


def plan(
    entries: Iterable[ProcessEntry],
    mailboxes: Mapping[Address, Mailbox],
    now: float,
    settings: Settings,
) -> list[Intent]:
    intents = []
    for entry in entries:
        intent = _intent(entry, mailboxes.get(entry.address), now, settings)
        if intent is not None:
            intents.append(intent)
    return intents


class Reconciler:
    def __init__(self, supervisor: Supervisor, settings: Settings) -> None:
        self.supervisor = supervisor
        self.settings = settings
        self.keep = hibernation.kept(settings.max_live_instances)
        """Deactivated instances the daemon keeps in its table (and `goondan status`)."""
        self._trimmed_at = 0.0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reconcile_interval)
            self.tick()
            now = time.monotonic()
            if now - self._trimmed_at >= heaptrim.EVERY_S:
                self._trimmed_at = now
                # in a thread: a trim walks the heap for a few ms, the loop goes on meanwhile
                await asyncio.to_thread(heaptrim.trim)

    def tick(self) -> None:
        sup = self.supervisor
        if sup.closing:
            return
        for intent in plan(sup.table, sup.mailboxes, sup.clock(), self.settings):
            self._apply(intent)
        hibernation.sweep(sup, self.keep)

    def _apply(self, intent: Intent) -> None:
        sup = self.supervisor
        entry = sup.table.entry(intent.address)
        match intent:
            case Start():
                sup.ensure(intent.address)
            case ResumeBackoff():
                sup.respawn_if_due(entry)
            case StopIdle():
                log.info("idle_stop", process=str(entry.process_id))
                sup.deactivate(entry)
            case Probe():
                liveness.probe(entry, sup.deliveries.send)
            case KillWedged(silent_for=silent):
                log.error("wedged", process=str(entry.process_id), silent_for=round(silent, 1))
                sup.kill(entry)
