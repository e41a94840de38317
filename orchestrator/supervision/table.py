"""The process table: one entry per child address, changed only through `transition()`.

`transition()` asserts that the entry is in one of the expected source statuses and that the
edge is in `states.ALLOWED`, stamps the monotonic time and tells the listener (the logger).
The table knows nothing about sockets or the OS; the supervisor drives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from orchestrator.supervision.states import LIVE, ProcessStatus, is_allowed
from protocol.control import DEACTIVATED, ExitInfo, ProcessInfo
from protocol.errors import ErrorInfo
from protocol.ids import Address, ProcessId, routing_id

Clock = Callable[[], float]
TransitionListener = Callable[["ProcessEntry", ProcessStatus, ProcessStatus], None]
GONE_PIDS = 4096
"""Exited pids remembered: a connection closes just after its process exits."""


class TransitionError(AssertionError):
    """A transition from the wrong status: a supervisor bug, never bad input."""


@dataclass(slots=True)
class ProcessEntry:
    address: Address
    status: ProcessStatus = ProcessStatus.TERMINATED
    generation: int = 0
    pid: int | None = None
    restarts: int = 0
    """Respawns after the first start (crashes and restarts alike)."""
    crashes: int = 0
    """Consecutive crashes; reset by a completed turn."""
    start_errors: int = 0
    """Consecutive start failures; reset by `ready`."""
    last_exit: ExitInfo | None = None
    start_error: ErrorInfo | None = None
    """The `start_error` of the current generation, if it sent one."""
    changed_at: float = 0.0
    retry_at: float | None = None
    """Monotonic time before which a held-down entry is not restarted."""
    last_seen: float = 0.0
    """Monotonic time of the last frame from the current generation."""
    spawned_at: float = 0.0
    ever_started: bool = False
    nonce: str = ""
    """The current generation's spawn secret (part of its routing identity)."""
    probed_at: float = 0.0
    """Monotonic time the orchestrator last asked a silent process for a sign of life (an
    idle one beats no more; ARCHITECTURE.md §4). Answered when `last_seen` is later."""
    parked_at: float | None = None
    """Monotonic time the process said its turn waits for a client (a `quiet` beat): it is
    processing and silent. Any status change or beat ends it."""
    deactivated: bool = False
    """The last stop was a deactivation (idle timeout, or room made at the live bound): its
    state is on disk and its next event starts it again."""
    killed: bool = False
    """The daemon SIGKILLed the current generation (a wedge, a limit it enforces, a stop whose
    grace ran out): the turn it ran is not given to the next one, which would do the same."""
    handing_over: bool = False
    """The current generation is stopped to give its instance to another cluster node (its
    partition handed over): a turn the stop cuts runs again there, it is not a crash."""
    protocol: int = 0
    """The protocol version the current generation said in `hello` (0: not yet)."""
    _ids: tuple[int, ProcessId, str, bytes] | None = field(default=None, repr=False)
    """(generation, id, text, routing bytes), rebuilt when the generation changes."""

    def _current_ids(self) -> tuple[int, ProcessId, str, bytes]:
        ids = self._ids
        if ids is None or ids[0] != self.generation or not ids[3].endswith(self.nonce.encode()):
            pid = self.address.with_generation(self.generation)
            text = str(pid)
            ids = self._ids = (self.generation, pid, text, routing_id(pid, self.nonce))
        return ids

    @property
    def process_id(self) -> ProcessId:
        return self._current_ids()[1]

    @property
    def id_text(self) -> str:
        """`str(process_id)`, cached: the hot path sends with it."""
        return self._current_ids()[2]

    @property
    def routing_id(self) -> bytes:
        """The ZeroMQ routing identity of the current generation."""
        return self._current_ids()[3]

    @property
    def live(self) -> bool:
        return self.status in LIVE

    def info(self, now: float | None = None, pending: int = 0) -> ProcessInfo:
        """The row of `goondan status`. An instance held down after a start error shows
        `startFailed` (its state is terminated, but it is not stopped for good), and both it
        and `crashLoopBackOff` say when the next start is due."""
        status = str(self.status)
        if self.status is ProcessStatus.TERMINATED and self.retry_at is not None:
            status = "startFailed"
        elif self.status is ProcessStatus.TERMINATED and self.deactivated:
            status = DEACTIVATED
        retry = None
        if self.retry_at is not None and now is not None:
            retry = round(max(0.0, self.retry_at - now), 1)
        return ProcessInfo(
            id=str(self.process_id),
            kind=str(self.address.kind),
            name=self.address.name,
            instance_key=self.address.instance_key,
            pid=self.pid if self.live else None,
            status=status,
            restarts=self.restarts,
            generation=self.generation,
            last_exit=self.last_exit,
            retry_in_seconds=retry,
            pending=pending,
        )


@dataclass(slots=True)
class ProcessTable:
    clock: Clock = time.monotonic
    listener: TransitionListener | None = None
    _entries: dict[Address, ProcessEntry] = field(default_factory=dict)
    _live: dict[Address, ProcessEntry] = field(default_factory=dict)
    """The entries in a LIVE status, kept by `transition()`: the capacity check and the
    shutdown look at these, not at every instance ever seen."""
    _idle: dict[Address, ProcessEntry] = field(default_factory=dict)
    """The idle entries, least recently used first (a dict keeps insertion order, and an
    entry is inserted when it becomes idle): where room is made at the live bound."""
    _parked: dict[Address, ProcessEntry] = field(default_factory=dict)
    """Processing entries whose turn waits for its client (`park`), in the order they parked."""
    _pids: set[int] = field(default_factory=set)
    _gone_pids: dict[int, None] = field(default_factory=dict)
    """The last GONE_PIDS exited pids, oldest first (a dict keeps order)."""

    def get(self, address: Address) -> ProcessEntry | None:
        return self._entries.get(address)

    def entry(self, address: Address) -> ProcessEntry:
        """The entry of `address`, created `terminated` (never started) if it is new."""
        found = self._entries.get(address)
        if found is None:
            found = ProcessEntry(address=address, changed_at=self.clock())
            self._entries[address] = found
        return found

    def remove(self, address: Address) -> None:
        entry = self._entries.get(address)
        if entry is not None and entry.live:
            raise TransitionError(f"cannot remove {address}: it is {entry.status}")
        self._entries.pop(address, None)

    def __iter__(self) -> Iterator[ProcessEntry]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def live(self) -> list[ProcessEntry]:
        return list(self._live.values())

    def idle(self) -> Iterator[ProcessEntry]:
        """The idle entries, least recently used first."""
        return iter(list(self._idle.values()))

    def parked(self) -> Iterator[ProcessEntry]:
        """The entries whose turn waits for its client, the longest waiting first."""
        return iter(list(self._parked.values()))

    def park(self, entry: ProcessEntry, at: float | None) -> None:
        """Its turn waits for its client since `at` (None: it goes on); any status change
        ends a park too."""
        entry.parked_at = at
        self._parked.pop(entry.address, None)
        if at is not None:
            self._parked[entry.address] = entry

    # -- pids: whose connections these were (orchestrator/routing/peers.py) ---------------------

    def pid_started(self, pid: int) -> None:
        self._pids.add(pid)

    def pid_gone(self, pid: int) -> None:
        self._pids.discard(pid)
        self._gone_pids[pid] = None
        if len(self._gone_pids) > GONE_PIDS:
            del self._gone_pids[next(iter(self._gone_pids))]

    def had_pid(self, pid: int) -> bool:
        """Whether `pid` is, or just was, one of our children."""
        return pid in self._pids or pid in self._gone_pids

    def transition(
        self,
        entry: ProcessEntry,
        target: ProcessStatus,
        *,
        expect: ProcessStatus | Iterable[ProcessStatus],
    ) -> None:
        expected = {expect} if isinstance(expect, ProcessStatus) else set(expect)
        source = entry.status
        if source not in expected:
            raise TransitionError(
                f"{entry.process_id}: {source} -> {target} expected the source to be "
                f"{sorted(expected)}"
            )
        if not is_allowed(source, target):
            raise TransitionError(f"{entry.process_id}: {source} -> {target} is not allowed")
        entry.status = target
        entry.changed_at = self.clock()
        self.park(entry, None)
        address = entry.address
        if target in LIVE:
            self._live[address] = entry
        else:
            self._live.pop(address, None)
        self._idle.pop(address, None)
        if target is ProcessStatus.IDLE:
            self._idle[address] = entry
        if self.listener is not None:
            self.listener(entry, source, target)
