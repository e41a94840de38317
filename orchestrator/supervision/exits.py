"""What the supervisor records when a child exits: the `lastExit` of `goondan status`, and the
child's log file when it wrote nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import structlog

from orchestrator.supervision.spawner import ChildHandle, ExitStatus
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry
from protocol.control import DEACTIVATED, ExitInfo
from protocol.errors import ErrorCode

log = structlog.get_logger("goondan.supervisor")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def record_exit(entry: ProcessEntry, handle: ChildHandle | None, known: ExitStatus | None) -> None:
    """Set `entry.last_exit` for the exit being handled (before its status transition); the
    exit status, when the spawner learns it later, fills the record in."""
    if entry.start_error is not None:
        reason = "start_error"
    elif entry.status is ProcessStatus.DRAINING:
        reason = DEACTIVATED if entry.deactivated else "stopped"
    else:
        entry.deactivated = False
        reason = "crashed"
    now = _iso(time.time())
    process = str(entry.process_id)
    code, sig = (known.code, known.signal) if known is not None else (None, None)
    recorded = entry.last_exit = ExitInfo(code=code, signal=sig, at=now, reason=reason)
    if handle is None:
        return

    def fill(fut: asyncio.Future[ExitStatus]) -> None:
        # the status may come after a respawn: update only the record made for this exit
        status = fut.result()
        why = reason
        if status.signal == signal.SIGXCPU and reason == "crashed":
            why = "cpu_limit"  # Agent.spec.limits.cpuSeconds (RLIMIT_CPU) ran out
            log.warning("agent_limit", process=process, code=ErrorCode.E_AGENT_LIMIT,
                        limit="cpuSeconds", exit=status.describe())  # fmt: skip
        if entry.last_exit is recorded:
            code, sig = status.code, status.signal
            entry.last_exit = ExitInfo(code=code, signal=sig, at=now, reason=why)
        log.info("exit_status", process=process, exit=status.describe())

    handle.status.add_done_callback(fill)


def drop_empty_log(path: Path) -> None:
    """A child that wrote nothing keeps no log file: at a million hibernated instances an empty
    file each is a million inodes. Call it before any respawn of the instance (the next process
    creates the file again)."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_size == 0:
            os.unlink(path)
