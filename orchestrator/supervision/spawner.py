"""The daemon's OS seam for its children: it starts the cold ones, and signals and waits for
every one (ARCHITECTURE.md §5 names the others: `orchestrator.supervision.forkserver` forks and
reaps the
forked children, `orchestrator.supervision.orphans` reaps and kills what the daemon adopts).

Two ways to start an agent process, one handle type:
- `ColdSpawner`: `python -m agent_process ARGS` through `os.posix_spawn`; we are the parent,
  so the exit status comes from `waitid(P_PIDFD)`.
- `ForkServerSpawner`: asks the fork server (orchestrator.supervision.forkserver) for a fork; the
pidfd
  arrives with the reply and the exit status in a later report from the server.

Either way a child is watched through its pidfd on the event loop: death is seen the moment
the kernel releases the process (ARCHITECTURE.md §8), not at the next reconcile tick; and its
fds 1 and 2 are the write end of a pipe the daemon reads (`orchestrator.supervision.childlog`): the
daemon
masks secrets in the child's output line by line and writes its log file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec
import structlog

from orchestrator.supervision import cgroups, orphans
from orchestrator.supervision.childlog import ChildOutputs
from orchestrator.supervision.forkserver import (
    MAX_DATAGRAM,
    Exited,
    ForkServerProcess,
    Spawned,
    SpawnFailed,
    SpawnRequest,
    reply_decoder,
    request_spawn,
)
from protocol.launch import ChildLaunch, encode_launch

log = structlog.get_logger("goondan.spawner")


class SpawnError(Exception):
    """The OS refused to start a child (fork/exec failed, fork server gone)."""


@dataclass(frozen=True, slots=True)
class ChildSpec:
    launch: ChildLaunch
    """Who the child is and where it finds us and its bundle: its one argument, encoded."""
    log_path: Path
    """stdout and stderr of the child go here (appended, line by line, secrets masked)."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the inherited environment."""


@dataclass(frozen=True, slots=True)
class ExitStatus:
    code: int | None
    signal: int | None
    at: float = 0.0
    """Wall-clock time the exit was seen."""

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        if self.code is None:
            return "exit status unknown"
        return f"exit code {self.code}"


UNKNOWN_EXIT = ExitStatus(code=None, signal=None)


class ChildHandle:
    """One started child: `exited` resolves when it is gone, `status` when its status is known."""

    def __init__(self, pid: int, pidfd: int, *, reap: bool) -> None:
        loop = asyncio.get_running_loop()
        self.pid = pid
        self._pidfd: int | None = pidfd
        self._reap = reap
        self.started_at = time.monotonic()
        self.exited: asyncio.Future[float] = loop.create_future()
        self.status: asyncio.Future[ExitStatus] = loop.create_future()
        loop.add_reader(pidfd, self._on_exit, loop)
        if reap:  # ours to wait for: the daemon's sweep of adopted orphans leaves it
            orphans.own(pid)

    def _on_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = self._pidfd
        if fd is None:
            return
        loop.remove_reader(fd)
        now = time.time()
        if self._reap:
            self.report_status(_waitid(fd, now))
            orphans.disown(self.pid)
        self._pidfd = None
        os.close(fd)
        if not self.exited.done():
            self.exited.set_result(now)

    def report_status(self, status: ExitStatus) -> None:
        if not self.status.done():
            self.status.set_result(status)

    def send_signal(self, sig: int) -> bool:
        """Signal the child through its pidfd (never a reused pid); False if it is gone."""
        if self._pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> bool:
        return self.send_signal(signal.SIGKILL)


def _waitid(pidfd: int, now: float) -> ExitStatus:
    try:
        res = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
    except ChildProcessError:
        return UNKNOWN_EXIT
    if res is None:
        return UNKNOWN_EXIT
    if res.si_code == os.CLD_EXITED:
        return ExitStatus(code=res.si_status, signal=None, at=now)
    return ExitStatus(code=None, signal=res.si_status, at=now)


class Spawner(Protocol):
    mode: str

    async def spawn(self, spec: ChildSpec) -> ChildHandle: ...
    async def close(self) -> None: ...


class ColdSpawner:
    """`python -m <module> ARGS`: a fresh interpreter per child (fallback and tests)."""

    mode = "cold"

    def __init__(
        self,
        module: str = "agent_process",
        python: str = sys.executable,
        outputs: ChildOutputs | None = None,
        cgroup: Path | None = None,
    ) -> None:
        self.module = module
        self.python = python
        self.outputs = outputs if outputs is not None else ChildOutputs()
        self.cgroup = cgroup
        """The parent of the agents' cgroups: an exited child's cgroup is removed."""

    def watch(self, pid: int, pidfd: int, *, reap: bool) -> ChildHandle:
        """The handle of a started child; its cgroup goes when it does."""
        handle = ChildHandle(pid, pidfd, reap=reap)
        parent = self.cgroup
        if parent is not None:
            handle.exited.add_done_callback(lambda _f: cgroups.remove(parent, pid))
        return handle

    async def spawn(self, spec: ChildSpec) -> ChildHandle:
        # we are its parent: it exits at once if we died before its parent-death signal
        launch = msgspec.structs.replace(spec.launch, parent_pid=os.getpid())
        log_fd = self.outputs.open(spec.log_path)  # the pipe's write end
        # the launch (with the spawn's secret) goes through a pipe on stdin, not argv, which
        # any process of the user can read in /proc/<pid>/cmdline
        launch_in, launch_out = os.pipe()
        try:
            os.write(launch_out, encode_launch(launch).encode())
            os.close(launch_out)
            # posix_spawn is vfork+exec: it returns once the child has exec'd, before its imports
            pid = os.posix_spawn(  # noqa: ASYNC221
                self.python,
                [self.python, "-m", self.module, "-"],
                {**os.environ, **spec.env},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, launch_in, 0),
                    (os.POSIX_SPAWN_DUP2, log_fd, 1),
                    (os.POSIX_SPAWN_DUP2, log_fd, 2),
                ],
                # own process group: the terminal's Ctrl-C is for the daemon alone
                setpgroup=0,
            )
        except OSError as exc:
            raise SpawnError(f"cannot start {self.python} -m {self.module}: {exc}") from exc
        finally:
            os.close(log_fd)
            os.close(launch_in)
        return self.watch(pid, os.pidfd_open(pid), reap=True)

    async def close(self) -> None:
        await self.outputs.close()


class ForkServerSpawner:
    """Forks children from the pre-imported fork server; falls back to cold if it dies."""

    def __init__(self, server: ForkServerProcess, fallback: ColdSpawner) -> None:
        """Built on the running event loop: it reads the server's replies and watches its
        pidfd from here on."""
        self.server = server
        self.fallback = fallback
        self.mode = "forkserver"
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[tuple[int, int]]] = {}
        self._children: dict[int, ChildHandle] = {}
        self._alive = True
        self._closing = False
        loop = asyncio.get_running_loop()
        self.server.sock.setblocking(False)
        loop.add_reader(self.server.sock.fileno(), self._on_readable)
        self._server_handle = ChildHandle(
            self.server.pid, os.pidfd_open(self.server.pid), reap=True
        )
        self._server_handle.status.add_done_callback(self._server_died)

    @property
    def alive(self) -> bool:
        return self._alive

    async def spawn(self, spec: ChildSpec) -> ChildHandle:
        if not self._alive:
            return await self.fallback.spawn(spec)
        output_fd = self.fallback.outputs.open(spec.log_path)
        self._next_id += 1
        req_id = self._next_id
        fut: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        argv = [encode_launch(spec.launch)]
        req = SpawnRequest(req_id=req_id, argv=argv, env=spec.env)
        try:
            request_spawn(self.server, req, output_fd)
        except OSError as exc:
            self._pending.pop(req_id, None)
            raise SpawnError(f"fork server unreachable: {exc}") from exc
        finally:
            os.close(output_fd)  # the server has its own copy now, or there is no child
        pid, pidfd = await fut
        handle = self.fallback.watch(pid, pidfd, reap=False)
        self._children[pid] = handle
        handle.status.add_done_callback(lambda _f: self._children.pop(pid, None))
        return handle

    def _on_readable(self) -> None:
        while True:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.server.sock, MAX_DATAGRAM, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._stop_reading()
                return
            self._dispatch(data, fds)

    def _dispatch(self, data: bytes, fds: list[int]) -> None:
        try:
            reply = reply_decoder.decode(data)
        except msgspec.DecodeError:
            log.error("forkserver_bad_reply", size=len(data))
            for fd in fds:
                os.close(fd)
            return
        match reply:
            case Spawned(req_id=req_id, pid=pid):
                fut = self._pending.pop(req_id, None)
                if fut is not None and fds:
                    fut.set_result((pid, fds[0]))
                else:
                    for fd in fds:
                        os.close(fd)
            case SpawnFailed(req_id=req_id, message=message):
                fut = self._pending.pop(req_id, None)
                if fut is not None:
                    fut.set_exception(SpawnError(f"fork server could not fork: {message}"))
            case Exited(pid=pid, code=code, signal=sig):
                handle = self._children.get(pid)
                if handle is not None:
                    handle.report_status(ExitStatus(code=code, signal=sig, at=time.time()))

    def _stop_reading(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.server.sock.fileno())

    def _server_died(self, fut: asyncio.Future[ExitStatus]) -> None:
        self._alive = False
        status = fut.result()
        if not self._closing:
            log.error("forkserver_died", exit=status.describe(), fallback="cold spawns")
        for pending in self._pending.values():
            if not pending.done():
                pending.set_exception(SpawnError("the fork server died"))
        self._pending.clear()
        for handle in list(self._children.values()):
            handle.report_status(UNKNOWN_EXIT)

    async def close(self) -> None:
        """Close our end: the server sees EOF and exits; wait for it briefly."""
        self._closing = True
        statuses = [h.status for h in self._children.values() if h.exited.done()]
        if statuses:  # exits already seen: let their statuses arrive before we hang up
            await asyncio.wait(statuses, timeout=1.0)
        self._stop_reading()
        self.server.sock.close()
        handle = self._server_handle
        # wait() leaves the future alone on a timeout: awaiting it under asyncio.timeout
        # cancelled `exited` itself, and the wait after the kill then raised at once
        done, _ = await asyncio.wait({handle.exited}, timeout=2.0)
        if not done:
            handle.kill()
            await handle.exited
        await self.fallback.close()  # the children's last output is in their logs
