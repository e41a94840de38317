"""Desired vs actual, every `reconcileIntervalSeconds` (default 5 s): the safety net.

Crashes are handled when the exit is seen; this loop only repairs what an event could have
missed: queued events for a stopped process, a lost backoff timer, an idle child past its
idle timeout, a child whose heartbeats stopped (its loop is wedged). `plan()` is pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

from orchestrator.delivery import Mailbox
from orchestrator.settings import Settings
from orchestrator.states import READY, ProcessStatus
from orchestrator.supervisor import Supervisor
from orchestrator.table import ProcessEntry
from protocol.ids import Address, ProcessKind
from protocol.messages import ShutdownReason

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


@dataclass(frozen=True, slots=True)
class KillWedged:
    address: Address
    silent_for: float


Intent = Start | ResumeBackoff | StopIdle | KillWedged


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
    if entry.status in READY and now - entry.last_seen > settings.heartbeat_timeout:
        return KillWedged(address, silent_for=now - entry.last_seen)
    idle_timeout = settings.idle_timeout
    if (
        idle_timeout is not None
        and not always_up
        and entry.status is S.IDLE
        and (box is None or box.empty)
        and now - entry.changed_at >= idle_timeout
    ):
        return StopIdle(address)
    return None


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
        self._stopping: set[asyncio.Task[bool]] = set()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reconcile_interval)
            self.tick()

    def tick(self) -> None:
        sup = self.supervisor
        if sup.closing:
            return
        for intent in plan(sup.table, sup.router.mailboxes, sup.clock(), self.settings):
            self._apply(intent)

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
                task = asyncio.ensure_future(sup.stop(entry, ShutdownReason.IDLE))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
            case KillWedged(silent_for=silent):
                log.error("wedged", process=str(entry.process_id), silent_for=round(silent, 1))
                sup.kill(entry)
