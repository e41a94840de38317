"""`Agent.spec.limits` applied to the agent process, and inherited by every process its tools
start (docs/guides/running.md, "Resource limits").

The child applies them as soon as it has its bundle, before its tools load (`apply`). Soft and
hard limits are both lowered, so a tool cannot raise them back:
- `memory` -> RLIMIT_DATA: each process's private writable memory (heap, anonymous maps,
  thread stacks). Not RLIMIT_AS: CPython, glibc's per-thread malloc arenas, zmq and uvloop
  reserve address space they never touch (and shared libraries count there too), so RLIMIT_AS
  fails thread starts long before memory is used. RLIMIT_DATA counts what can become resident,
  and a breach is a failed allocation: Python raises MemoryError where it allocates, and a
  tool call turns that into E_AGENT_LIMIT (`as_limit_error`); the process keeps serving.
- `cpuSeconds` -> RLIMIT_CPU, the hard limit a few seconds later: at the soft limit the kernel
  sends SIGXCPU, whose default action ends the process (SIGKILL at the hard one); the
  supervisor records the crash with reason `cpu_limit`.
- `openFiles` -> RLIMIT_NOFILE.
- `processes` -> RLIMIT_NPROC: it counts every process and thread of the user (the real uid),
  not of this agent alone, and the kernel does not apply it to root.
- Where the daemon's cgroup v2 directory is delegated to it, the daemon names a parent
  (`LaunchSettings.cgroup`, `orchestrator/supervision/cgroups.py`): the agent makes its own cgroup
  there,
  writes memory.max, pids.max and cpu.max, marks it delegated (the bash tool then makes its
  per-call cgroups inside) and moves into it. pids.max counts this agent's processes only; a
  memory.max breach is the kernel's OOM kill.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from pathlib import Path

import structlog

from bundles.limits import Limits
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode
from protocol.launch import agent_cgroup

log = structlog.get_logger("goondan.limits")

CPU_GRACE_SECONDS = 5
"""From SIGXCPU (soft) to SIGKILL (hard), for a process that ignores SIGXCPU."""
CPU_PERIOD_US = 100_000
"""cgroup cpu.max period: `cpus` 0.5 is "50000 100000"."""


def _lower(which: int, value: int, hard: int | None = None) -> None:
    """Set soft to `value` and hard to `hard` (default `value`), never above the current hard
    limit (an unprivileged process cannot raise it)."""
    _soft, current = resource.getrlimit(which)
    top = hard if hard is not None else value
    if current != resource.RLIM_INFINITY:
        value, top = min(value, current), min(top, current)
    resource.setrlimit(which, (value, top))


def apply(limits: Limits, cgroup_parent: str = "") -> Path | None:
    """Apply `limits` to this process (and so to what it starts); returns the agent's own
    cgroup when it moved into one."""
    if limits.memory is not None:
        _lower(resource.RLIMIT_DATA, limits.memory)
    if limits.cpu_seconds is not None:
        _lower(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + CPU_GRACE_SECONDS)
    if limits.open_files is not None:
        _lower(resource.RLIMIT_NOFILE, limits.open_files)
    if limits.processes is not None:
        _lower(resource.RLIMIT_NPROC, limits.processes)
    if not cgroup_parent:
        return None
    try:
        return join_cgroup(Path(agent_cgroup(cgroup_parent, os.getpid())), limits)
    except OSError as exc:  # the rlimits hold anyway
        log.warning("cgroup_not_joined", parent=cgroup_parent, error=str(exc))
        return None


def cgroup_files(limits: Limits) -> dict[str, str]:
    """What the agent's cgroup gets: memory.max, pids.max, cpu.max (each only when set)."""
    files = {}
    if limits.memory is not None:
        files["memory.max"] = str(limits.memory)
    if limits.processes is not None:
        files["pids.max"] = str(limits.processes)
    if limits.cpus is not None:
        files["cpu.max"] = f"{max(1000, round(limits.cpus * CPU_PERIOD_US))} {CPU_PERIOD_US}"
    return files


def join_cgroup(path: Path, limits: Limits) -> Path:
    """Make the cgroup `path`, write its limits, mark it delegated, move this process in."""
    path.mkdir(exist_ok=True)
    for name, value in cgroup_files(limits).items():
        if not (path / name).exists():  # the controller is not enabled for us
            log.warning("cgroup_limit_unavailable", file=name)
            continue
        (path / name).write_text(value)
    attribute = "trusted.delegate" if os.geteuid() == 0 else "user.delegate"
    with contextlib.suppress(OSError):  # only the bash tool's per-call cgroups depend on it
        os.setxattr(path, attribute, b"1")
    (path / "cgroup.procs").write_text(str(os.getpid()))
    return path


def as_limit_error(exc: Exception, limits: Limits) -> Exception:
    """A tool's exception that is a breach of the agent's limits, as a coded E_AGENT_LIMIT
    failure; any other exception unchanged. Running out of memory always is one (the machine's
    memory is a limit too); a process or thread that could not start (EAGAIN from fork or
    spawn, a thread start refused) is one where the agent has a process limit."""
    if isinstance(exc, MemoryError):
        which = f"its limit is {limits.memory} bytes" if limits.memory else "the machine's"
        return ToolFailed(
            f"the tool ran out of memory ({which}; Agent.spec.limits.memory)",
            code=ErrorCode.E_AGENT_LIMIT,
            suggestion="Work on less data at once (a smaller file, a page of results).",
        )
    refused = (isinstance(exc, BlockingIOError) and exc.errno == errno.EAGAIN) or (
        isinstance(exc, RuntimeError) and "thread" in str(exc)
    )
    if refused and limits.processes is not None:
        return ToolFailed(
            "the tool could not start a process or thread: the agent's process limit "
            f"(Agent.spec.limits.processes: {limits.processes}) is reached",
            code=ErrorCode.E_AGENT_LIMIT,
            suggestion="Wait for running commands to end, or start fewer at once.",
        )
    return exc
