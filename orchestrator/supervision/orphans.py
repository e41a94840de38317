"""The daemon adopts the orphans of its agents (PR_SET_CHILD_SUBREAPER), and reaps them.

The control socket refuses whatever runs under the daemon (`orchestrator/control/fence.py`),
which it tells by the parent chain in /proc. A process an agent's tool started could leave that
chain: kill its parent (the call's reaper, the tool's shell), and an orphan is re-parented to
the nearest subreaper above it, or to init. The fork server and the daemon are subreapers, so
an orphan of an agent lands on one of them and stays under the daemon.

Whoever adopts must reap. The fork server already reaps every child it has. The daemon's own
children (the fork server, cold-started agents) are reaped through their pidfds
(`orchestrator/supervision/spawner.py`), so the sweep here reaps only children it was not told about
(`own`/`disown`): it never steals an exit status the supervisor waits for. uvloop keeps SIGCHLD
for itself, so the sweep runs on a timer; a zombie waits at most one period.

What is still under the daemon when it stops, after its agents and the fork server are gone,
was left behind by a tool: `kill_strays` kills it, so it cannot outlive this daemon and use the
token of the next one (a daemon killed by SIGKILL cannot; systemd's stop kills the service's
cgroup).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
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


def descendants(root: int) -> list[int]:
    """Every process below `root`, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(entry.path, "stat").read_text()
                children.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(
                    int(entry.name)
                )
    found: list[int] = []
    pending = [root]
    while pending:
        for pid in children.get(pending.pop(), []):
            found.append(pid)
            pending.append(pid)
    return found


def _kill_all(pids: list[int]) -> list[int]:
    """SIGKILL through pidfds those of `pids` still under us (never a reused pid): a pidfd
    names one process, so the check after opening it holds until the signal."""
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fds[pid] = os.pidfd_open(pid)
    killed: list[int] = []
    try:
        ours = set(descendants(os.getpid()))
        for pid, fd in fds.items():
            if pid in ours:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    killed.append(pid)
    finally:
        for fd in fds.values():
            os.close(fd)
    return killed


def kill_strays(limit: float = 2.0) -> int:
    """At the daemon's end: SIGKILL and reap every descendant nobody waits for; how many."""
    killed: set[int] = set()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        strays = [pid for pid in descendants(os.getpid()) if pid not in _own]
        if not strays:
            break
        killed.update(_kill_all(strays))
        sweep()
        time.sleep(0.01)  # the killed die, their children come to us: look again
    if killed:
        why = "processes a tool left behind, still running at the daemon's end"
        log.warning("strays_killed", count=len(killed), reason=why)
    return len(killed)
