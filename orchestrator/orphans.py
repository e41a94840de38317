"""The daemon adopts the orphans of its agents (PR_SET_CHILD_SUBREAPER), and reaps them.

The control socket refuses whatever runs under the daemon (`orchestrator/control_auth.py`),
which it tells by the parent chain in /proc. A process an agent's tool started could leave that
chain: kill its parent (the call's reaper, the tool's shell), and an orphan is re-parented to
the nearest subreaper above it, or to init. The fork server and the daemon are subreapers, so
an orphan of an agent lands on one of them and stays under the daemon.

Whoever adopts must reap. The fork server already reaps every child it has. The daemon's own
children (the fork server, cold-started agents) are reaped through their pidfds
(`orchestrator/spawner.py`), so the sweep here reaps only children it was not told about
(`own`/`disown`): it never steals an exit status the supervisor waits for. uvloop keeps SIGCHLD
for itself, so the sweep runs on a timer; a zombie waits at most one period.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from pathlib import Path

import structlog

log = structlog.get_logger("goondan.orphans")

PR_SET_CHILD_SUBREAPER = 36
SWEEP_SECONDS = 1.0
_own: set[int] = set()


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("subreaper_unavailable", error=os.strerror(ctypes.get_errno()))
        return False
    return True


def own(pid: int) -> None:
    """`pid` is a child whose exit status someone here waits for: the sweep leaves it."""
    _own.add(pid)


def disown(pid: int) -> None:
    _own.discard(pid)


def children() -> list[int]:
    """The pids of this process's children (every thread's), from /proc."""
    found: list[int] = []
    try:
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):  # a thread that ended while we looked
            found += [int(pid) for pid in (task / "children").read_text().split()]
    return found


def sweep() -> int:
    """Reap the children that exited and nobody waits for; how many were reaped."""
    reaped = 0
    for pid in children():
        if pid in _own:
            continue
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # reaped by its own waiter between the listing and now
        if done:
            reaped += 1
            log.debug("orphan_reaped", pid=pid, status=status)
    return reaped


async def reap_forever(period: float = SWEEP_SECONDS) -> None:
    """Sweep every `period` s (run as a task of the daemon, cancelled at its end)."""
    while True:
        await asyncio.sleep(period)
        sweep()
