"""How many agent processes may live at once, and who waits for a slot.

Anyone who can send an event with a new instance key (a webhook client, a chat user) can make
the daemon start a process; unbounded, that exhausts the machine. `Swarm.spec.policy.
maxLiveInstances` bounds the live agent processes (connectors do not count). At the bound, the
least recently used idle instance is deactivated to make room (a turn parked on a client-side
call counts as idle since it parked): its state stays on disk and it starts again on its next
event. Only when every live instance is busy does a new one wait for a slot, and a request to
it is answered at once with E_AGENT_CAPACITY rather than left waiting.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from orchestrator.supervision.mailboxes import Mailbox
from orchestrator.supervision.states import ProcessStatus as S
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.errors import ErrorCode, ErrorInfo
from protocol.ids import Address, ProcessKind

BYTES_PER_INSTANCE = 16 << 20
"""Budget per live agent for the default bound: a few times what an idle agent takes (USS per
idle agent in `bench_spawn`), for one mid-turn with a model client and a conversation in
memory."""
MIN_DEFAULT = 16


def default_limit(total_memory: int | None = None) -> int:
    """The bound when the policy sets none: the machine's memory over BYTES_PER_INSTANCE."""
    if total_memory is None:
        try:
            total_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return 1000
    return max(MIN_DEFAULT, total_memory // BYTES_PER_INSTANCE)


def capacity_error(limit: int) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.E_AGENT_CAPACITY,
        message=f"all {limit} live agent instances are busy (Swarm.spec.policy."
        "maxLiveInstances); the instance starts when one is free",
        suggestion="send again in a moment, or raise maxLiveInstances if the machine has room",
    )


class Capacity:
    def __init__(
        self, limit: int, table: ProcessTable, mailbox: Callable[[Address], Mailbox | None]
    ) -> None:
        self.limit = limit
        self._table = table
        self._mailbox = mailbox
        self.waiting: dict[Address, None] = {}
        """Instances that want a process, in the order they asked (a set that keeps order)."""

    def _agents(self) -> list[ProcessEntry]:
        return [e for e in self._table.live() if e.address.kind is ProcessKind.AGENT]

    def room(self) -> bool:
        return len(self._agents()) < self.limit

    def leaving(self) -> int:
        """Agents already on their way out (each frees a slot when it exits)."""
        return sum(1 for e in self._agents() if e.status is S.DRAINING)

    def victim(self) -> ProcessEntry | None:
        """The least recently used idle instance with nothing queued, if any: idle since its
        last turn, or parked on a client-side call since it parked (resumed from its files)."""
        idle = next((e for e in self._table.idle() if self._free(e, queued_only=False)), None)
        parked = next((e for e in self._table.parked() if self._free(e, queued_only=True)), None)
        if idle is None or parked is None:
            return idle or parked
        return parked if (parked.parked_at or 0.0) < idle.changed_at else idle

    def _free(self, entry: ProcessEntry, *, queued_only: bool) -> bool:
        """An agent with nothing waiting for it (a parked turn's own event is in flight)."""
        if entry.address.kind is not ProcessKind.AGENT:
            return False
        box = self._mailbox(entry.address)
        return box is None or (not box.queue if queued_only else box.empty)


class Admitted:
    """Start it now."""


class Evict:
    """Stop `victim` (idle, least recently used) to make room; the instance waits for it."""

    def __init__(self, victim: ProcessEntry) -> None:
        self.victim = victim


class Busy:
    """Every live instance is busy: the instance waits, its requests get `error` now."""

    def __init__(self, error: ErrorInfo) -> None:
        self.error = error


class Waiting:
    """A slot is on its way (an instance is already stopping): wait for it."""


Admission = Admitted | Evict | Busy | Waiting


def decide(capacity: Capacity, address: Address) -> Admission:
    """May `address` start a process now? (The caller acts on the answer.)"""
    capacity.waiting.pop(address, None)
    if capacity.room():
        return Admitted()
    capacity.waiting[address] = None
    if len(capacity.waiting) > capacity.leaving():
        victim = capacity.victim()
        if victim is not None:
            return Evict(victim)
    if capacity.leaving():
        return Waiting()
    return Busy(capacity_error(capacity.limit))
