"""Hibernated instances: deactivated, and forgotten by the daemon beyond the most recent few.

An instance is a virtual actor (ARCHITECTURE.md §5): its first event activates it (a process is
forked), and it is deactivated when idle (`idleTimeoutSeconds`) or to make room at the live
bound (`maxLiveInstances`). A deactivated instance's state is its files (conversation, extension
state, pending calls, inbox), and events for it are journaled before they are taken, so the
daemon may forget it entirely: its next event creates a new table entry and starts it from its
files. That is what keeps the daemon's memory flat when a million users each talk once: the
process table holds the live instances, the failing ones, and the last `kept()` deactivated
ones (`goondan status` shows those as `deactivated`); the rest are directories on disk.

Nothing that is owed anything is forgotten: an entry with queued or in-flight events, one
waiting for a slot, one held down after a start error, or one that is live, stays.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from orchestrator.supervision.mailboxes import Mailbox
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry
from protocol.ids import Address, ProcessKind

KEEP_MIN = 1024
"""Deactivated instances kept in the table at least (see `kept`)."""


def kept(max_live: int) -> int:
    """How many deactivated instances the table keeps: as many as may be live, at least
    KEEP_MIN, so `goondan status` shows the recent ones and a busy instance that just went
    idle is still known when its next event comes."""
    return max(KEEP_MIN, max_live)


def forgettable(entry: ProcessEntry, box: Mailbox | None, waiting: Collection[Address]) -> bool:
    return (
        entry.address.kind is ProcessKind.AGENT
        and entry.status is ProcessStatus.TERMINATED
        and entry.retry_at is None
        and (box is None or box.empty)
        and entry.address not in waiting
    )


def to_forget(
    entries: Iterable[ProcessEntry],
    mailboxes: Mapping[Address, Mailbox],
    waiting: Collection[Address],
    keep: int,
) -> list[Address]:
    """The forgettable entries beyond the `keep` most recently stopped, oldest first."""
    down = [e for e in entries if forgettable(e, mailboxes.get(e.address), waiting)]
    if len(down) <= keep:
        return []
    down.sort(key=lambda e: e.changed_at)
    return [e.address for e in down[: len(down) - keep]]


def sweep(supervisor: Supervisor, keep: int) -> int:
    """Forget what `to_forget` picks; how many were forgotten."""
    mailboxes, table = supervisor.mailboxes, supervisor.table
    chosen = to_forget(table, mailboxes, supervisor.capacity.waiting, keep)
    for address in chosen:
        table.remove(address)
        mailboxes.forget(address)
    return len(chosen)
