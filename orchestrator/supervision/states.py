"""Process statuses of the process table and the transitions allowed between them (leaf module).

Every change of status goes through `orchestrator.supervision.table.ProcessTable.transition`, which
checks
the pair against `ALLOWED`; call sites label the edge they take (`# spawning -> idle`).
"""

from __future__ import annotations

from enum import StrEnum


class ProcessStatus(StrEnum):
    SPAWNING = "spawning"
    """Forked or exec'd; `hello`/`ready` not yet received. Events for it are queued."""
    IDLE = "idle"
    PROCESSING = "processing"
    DRAINING = "draining"
    """Sent `shutdown`: finishing its turn; SIGKILL when the grace period ends."""
    TERMINATED = "terminated"
    """Exited on purpose (shutdown, idle stop, start failure held). Respawned on demand."""
    CRASHED = "crashed"
    """Died unexpectedly; the crash policy decides what happens next."""
    CRASH_LOOP_BACKOFF = "crashLoopBackOff"
    """Crashed too often: waits out the backoff delay, then respawns."""


S = ProcessStatus

LIVE: frozenset[ProcessStatus] = frozenset({S.SPAWNING, S.IDLE, S.PROCESSING, S.DRAINING})
"""A process exists (a pid is set) in these statuses."""

READY: frozenset[ProcessStatus] = frozenset({S.IDLE, S.PROCESSING})
"""The process has sent `ready`: events go straight to it."""

DOWN: frozenset[ProcessStatus] = frozenset({S.TERMINATED, S.CRASHED, S.CRASH_LOOP_BACKOFF})

ALLOWED: dict[ProcessStatus, frozenset[ProcessStatus]] = {
    # spawning -> idle on ready; -> crashed on death or start_error; -> draining when stopped
    S.SPAWNING: frozenset({S.IDLE, S.CRASHED, S.DRAINING}),
    S.IDLE: frozenset({S.PROCESSING, S.DRAINING, S.CRASHED}),
    S.PROCESSING: frozenset({S.IDLE, S.DRAINING, S.CRASHED}),
    # draining -> terminated on a clean exit; -> crashed when it dies without shutdown_ack
    S.DRAINING: frozenset({S.TERMINATED, S.CRASHED}),
    S.TERMINATED: frozenset({S.SPAWNING}),
    # crashed -> spawning (respawn now) | crashLoopBackOff (wait) | terminated (held / stopped)
    S.CRASHED: frozenset({S.SPAWNING, S.CRASH_LOOP_BACKOFF, S.TERMINATED}),
    S.CRASH_LOOP_BACKOFF: frozenset({S.SPAWNING, S.TERMINATED}),
}


def is_allowed(source: ProcessStatus, target: ProcessStatus) -> bool:
    return target in ALLOWED[source]
