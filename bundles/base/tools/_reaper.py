"""Per-call reaper for `bash` where no cgroup is at hand.

Usage: `python -I -S _reaper.py GRACE_MS PARENT_PID [--spare-child] -- ARGV...`.

It makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), runs ARGV as its only child in a
session of its own, and waits. Whatever the call starts is its descendant, and a process that
detaches (`setsid cmd &`, `setsid -f`, a double fork, a daemon) is reparented to it rather than
to init, so nothing the call started can leave its tree. When ARGV ends, or on a signal, it
kills every descendant it has, reaps them, and exits the way ARGV did (same code, or the same
signal), so the agent reads the command's status from this process. The agent process is never
a subreaper itself: it neither adopts nor reaps processes it did not start.

Signals from the agent: SIGTERM = stop gracefully (SIGTERM to every descendant, up to GRACE_MS
for ARGV to exit, then SIGKILL to all); SIGUSR1 = SIGKILL everything now. With
`--spare-child` the SIGTERM skips ARGV's own process: a sandbox (bubblewrap) that would die of
it at once, and take the command with it before its grace period. It also gets SIGUSR1
when the agent process dies (PR_SET_PDEATHSIG). A command that deliberately kills this process
first can still leave orphans behind: `bash` runs with the agent's uid and is no security
boundary.

Run as a script, so it imports the stdlib only and starts quickly (`-S`: no site).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import sys
import time
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_CANNOT_RUN = 127
RESCAN_S = 0.05
"""How often the grace period looks for processes started after its SIGTERM."""


class _Stop(Exception):
    """Raised by the signal handlers to break out of a blocking wait."""

    def __init__(self, now: bool) -> None:
        super().__init__("now" if now else "graceful")
        self.now = now


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise _Stop(now=False)


def _on_now(signum: int, frame: FrameType | None) -> None:
    raise _Stop(now=True)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def descendants(root: int) -> list[int]:
    """Every process below `root`, from one pass over /proc (parents before children)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # it exited while we looked
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for pid in children.get(pending.pop(), []):
            found.append(pid)
            pending.append(pid)
    return found


def _signal_new(sig: int, spare: int, told: set[int]) -> set[int]:
    """`sig` to every descendant but `spare` not in `told`; returns who has been told now."""
    found = descendants(os.getpid())
    for pid in found:
        if pid == spare or pid in told:
            continue
        # Gone already, or it changed uid (a setuid program): not ours to kill.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return told.union(found)


def _signal_all(sig: int) -> None:
    _signal_new(sig, 0, set())


def _wait_for(pid: int, seconds: float) -> int | None:
    """The wait status of our child `pid` if it exits within `seconds`, else None."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], seconds)
    finally:
        os.close(fd)
    if not ready:
        return None
    return os.waitpid(pid, 0)[1]


def sweep(child: int, status: int | None) -> int | None:
    """SIGKILL every descendant and reap them all; returns `child`'s wait status."""
    while True:
        _signal_all(signal.SIGKILL)
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            return status  # nobody left: every orphan was reparented here and reaped
        if pid == child:
            status = wait_status


def _stop(child: int, now: bool, grace_s: float, spare: bool) -> int | None:
    """A stop request: SIGTERM all and give `child` the grace period, unless told `now`."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if now:
        return None
    deadline = time.monotonic() + grace_s
    told = _signal_new(signal.SIGTERM, child if spare else 0, set())
    try:
        while (left := deadline - time.monotonic()) > 0:
            status = _wait_for(child, min(left, RESCAN_S))
            if status is not None:
                return status
            # a process started after the first SIGTERM (the command itself, when a sandbox
            # took longer to set up than the deadline) is told too, once, not left to the kill
            told = _signal_new(signal.SIGTERM, child if spare else 0, told)
        return None
    except _Stop:
        return None  # SIGUSR1 during the grace period: kill now


def _exit_like(status: int | None) -> None:
    """Leave with the command's exit code, or die of the signal that killed it."""
    if status is None:
        os._exit(1)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of ours for its crash
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the two that cannot be caught
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal whose default is not to terminate


def _pristine_environ() -> dict[str, str]:
    """The environment we were started with: Python itself may have added to `os.environ`
    (PEP 538 sets LC_CTYPE in a C locale), the command must see exactly what the agent gave."""
    with open("/proc/self/environ", "rb") as source:
        pairs = [item.split(b"=", 1) for item in source.read().split(b"\0") if b"=" in item]
    return {os.fsdecode(name): os.fsdecode(value) for name, value in pairs}


def _spawn(argv: list[str]) -> int:
    try:
        return os.posix_spawnp(argv[0], argv, _pristine_environ(), setsid=True, setsigmask=())
    except OSError as error:
        sys.stderr.write(f"{argv[0]}: {error.strerror or error}\n")
        sys.stderr.flush()
        os._exit(EXIT_CANNOT_RUN)


def main(args: list[str]) -> None:
    grace_s, parent = int(args[0]) / 1000, int(args[1])
    spare = args[2] == "--spare-child"
    argv = args[4:] if spare else args[3:]  # after "--"
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGUSR1, _on_now)
    stops = {signal.SIGTERM, signal.SIGUSR1}
    status: int | None = None
    child = 0
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
        if os.getppid() != parent:
            raise _Stop(now=True)  # the agent died before PDEATHSIG was armed
        # Held back until `child` is known: a stop must never miss the process it is about.
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        child = _spawn(argv)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # only the command's processes may hold the output pipes
        os.dup2(devnull, 2)
        os.close(devnull)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        status = os.waitpid(child, 0)[1]
    except _Stop as stop:
        if child:
            status = _stop(child, stop.now, grace_s, spare)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    _exit_like(sweep(child, status))


if __name__ == "__main__":
    main(sys.argv[1:])
