"""Hold every process of one `bash` call, so that all of them die with the call.

A process group is not enough: `setsid cmd &`, `setsid -f` and a double fork into a new session
leave it. Two ways hold them all, chosen by the Tool's `processTracking` setting:

- `cgroup` (what `auto` picks when it can): a cgroup v2 directory per call, created under the
  agent process's own cgroup when that one is delegated to us (see `delegated_cgroup`). The
  leader moves itself into it before it runs the command, so every descendant is born inside;
  the end of the call writes `cgroup.kill`, which kills them all atomically, waits until the
  cgroup is empty and removes it.
- `subreaper` (everywhere else): the leader is `_reaper.py`, a small Python process that is a
  child subreaper. Detached processes are reparented to it, not to init, and it kills and reaps
  all its descendants before it exits with the command's status. The agent process itself
  adopts nothing, so its other children (MCP servers, concurrent calls) are never touched.

Either way a call only ever kills processes it started. Neither stops a command that means to
escape (moving itself to another cgroup, killing the reaper first): the sandbox (`_sandbox`)
does, with a PID namespace that cannot see the holder and dies with the call. With a sandbox
the leader is bubblewrap, which dies at once of a SIGTERM and takes the command with it: the
graceful stop spares the leader (`spare_leader`) and reaches the command directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from bundles.sdk import ToolFailed
from protocol.cgroupfs import marked_delegated, own_cgroup
from protocol.pids import pid_alive

REAPER = Path(__file__).with_name("_reaper.py")
REAPER_MARGIN_S = 5.0  # beyond the grace period: the reaper's own sweep and exit
_PREFIX = "goondan-call-"
_MOVE_SELF = 'echo $$ > "$0/cgroup.procs" || exit 126; exec "$@"'


class Tracking(StrEnum):
    AUTO = "auto"
    CGROUP = "cgroup"
    SUBREAPER = "subreaper"


class CallProcesses(Protocol):
    """One call's processes. `pid` is the leader's, the process the agent spawned."""

    margin_s: float

    def argv(self, argv: list[str]) -> list[str]: ...

    def terminate(self, pid: int) -> None:
        """Ask every process of the call to stop (SIGTERM), escalation follows. Called again
        during the grace period: a process started since is asked too, each one once."""

    def kill_now(self, pid: int) -> None:
        """SIGKILL every process of the call; synchronous, for cancellation paths too."""

    async def finish(self, deadline_s: float) -> None:
        """After the leader exited: make sure nothing of the call is left, and clean up."""


def delegated_cgroup() -> Path | None:
    """Where per-call cgroups may be made: our cgroup, if it is delegated to us, writable and
    new enough to have `cgroup.kill` (Linux 5.14); else None."""
    own = own_cgroup()
    if own is None or not (own / "cgroup.kill").exists():
        return None
    if not (os.access(own, os.W_OK) and os.access(own / "cgroup.procs", os.W_OK)):
        return None
    return own if marked_delegated(own) else None


class CgroupCall:
    """A cgroup v2 directory that holds one call."""

    margin_s = 0.0

    def __init__(self, parent: Path, spare_leader: bool = False) -> None:
        self.spare_leader = spare_leader
        _remove_stale(parent)
        self.path = parent / f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        self.removed = False
        self._told: set[int] = set()

    def argv(self, argv: list[str]) -> list[str]:
        return ["/bin/sh", "-c", _MOVE_SELF, str(self.path), *argv]

    def _pids(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        return []

    def terminate(self, pid: int) -> None:
        for member in self._pids():
            if (self.spare_leader and member == pid) or member in self._told:
                continue
            self._told.add(member)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGTERM)

    def kill_now(self, pid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / "cgroup.kill").write_text("1")

    async def finish(self, deadline_s: float) -> None:
        if self.removed:
            return
        self.kill_now(0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(deadline_s):
                while members := self._pids():
                    for member in members:
                        await _exited(member)
        try:
            self.path.rmdir()
            self.removed = True
        except OSError:
            pass  # EBUSY: a process stuck in the kernel; left (it is empty once that one dies)


class ReaperCall:
    """`_reaper.py` as the leader: a subreaper that sweeps its descendants before it exits."""

    def __init__(self, grace_s: float, spare_leader: bool = False) -> None:
        self.margin_s = REAPER_MARGIN_S
        self.grace_ms = max(1, round(grace_s * 1000))
        self.spare = ["--spare-child"] if spare_leader else []
        self._told = False

    def argv(self, argv: list[str]) -> list[str]:
        head = [sys.executable, "-I", "-S", str(REAPER), str(self.grace_ms), str(os.getpid())]
        return [*head, *self.spare, "--", *argv]

    def terminate(self, pid: int) -> None:
        if self._told:
            return  # the reaper looks for processes started since on its own
        self._told = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # the reaper passes it on to every descendant

    def kill_now(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)

    async def finish(self, deadline_s: float) -> None:
        return None  # the reaper exits only after every descendant is reaped


def _remove_stale(parent: Path) -> None:
    """Per-call cgroups of an agent process that died mid-call (no reaper's PDEATHSIG here):
    whatever they still hold should have died with that call. Our own are never touched: a
    concurrent call may have made one an instant ago and not moved into it yet."""
    for stale in parent.glob(f"{_PREFIX}*-*"):
        owner = stale.name.removeprefix(_PREFIX).split("-", 1)[0]
        if not owner.isdigit() or int(owner) == os.getpid() or pid_alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            (stale / "cgroup.kill").write_text("1")
            stale.rmdir()  # EBUSY until the kernel is done with them: the next call retries


async def _exited(pid: int) -> None:
    """Wait for `pid` (not necessarily our child) to exit, on a pidfd."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def tracking(setting: object) -> Tracking:
    try:
        return Tracking(str(setting))
    except ValueError:
        raise ToolFailed(
            f"Tool config 'processTracking' must be auto, cgroup or subreaper, got {setting!r}"
        ) from None


def open_call(setting: object, grace_s: float, spare_leader: bool = False) -> CallProcesses:
    """The holder of one call's processes, as `processTracking` asks; `spare_leader`: the
    leader is a sandbox that a SIGTERM would end at once (see the module docstring)."""
    mode = tracking(setting)
    parent = None if mode is Tracking.SUBREAPER else delegated_cgroup()
    if parent is not None:
        return CgroupCall(parent, spare_leader)
    if mode is Tracking.CGROUP:
        raise ToolFailed(
            "processTracking is 'cgroup' but the agent's cgroup is not a delegated, writable "
            "cgroup v2 directory with cgroup.kill",
            suggestion="Use processTracking: auto (a subreaper then holds the call's processes).",
        )
    return ReaperCall(grace_s, spare_leader)
