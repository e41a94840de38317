"""The fork server: a pre-imported process that forks agent children on request (ARCHITECTURE.md
§8).

`start_fork_server()` must run before the daemon creates any zmq Context, thread or event loop:
it forks this process; the copy imports the agent runtime stack (by module name, so the
orchestrator never imports agent_process code), calls `gc.freeze()` so children keep the
imported objects shared copy-on-write, and then serves requests over a SOCK_SEQPACKET pair.

For each `spawn` it forks; the child makes the pipe that came with the request (SCM_RIGHTS) its
stdout and stderr (the daemon reads the other end, `orchestrator.supervision.childlog`) and calls
`<entry>.main(argv)`. The server opens a pidfd of the child at once (before it can reap it,
so the pid cannot be reused under us) and passes it with the reply; when the child exits it
reaps it and reports the status. It dies with the daemon (PR_SET_PDEATHSIG), and so do its
children, which set their own PR_SET_PDEATHSIG. It is a child subreaper: a process an agent's
tool started and orphaned (its parent killed) is re-parented here, under the daemon, not to init
(`orchestrator/supervision/orphans.py` says why), and reaped here like the agents, without a report.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import setproctitle

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
MAX_DATAGRAM = 1 << 16
ENTRY = "agent_process.forkprep"
"""The daemon's entry module (named, not imported: the orchestrator never imports agent_process
code): `preload(**context)` before the first fork, `refresh()` after a bundle reload (a hook
request), `main(argv)` in each forked child."""


class SpawnRequest(msgspec.Struct, frozen=True, tag="spawn"):
    """Carries the child's stdout/stderr (a pipe's write end) as SCM_RIGHTS ancillary data."""

    req_id: int
    argv: list[str]
    env: dict[str, str] = msgspec.field(default_factory=dict)


class HookRequest(msgspec.Struct, frozen=True, tag="hook"):
    """Call `module.function()` in the server, between two spawns; no reply. The daemon sends
    `refresh` of its entry module after a bundle reload, so children forked afterwards take
    the new bundle preloaded instead of each loading it again (at every spawn)."""

    module: str
    function: str


Request = SpawnRequest | HookRequest


class Spawned(msgspec.Struct, frozen=True, tag="spawned"):
    """Carries the child's pidfd as SCM_RIGHTS ancillary data."""

    req_id: int
    pid: int


class SpawnFailed(msgspec.Struct, frozen=True, tag="failed"):
    req_id: int
    message: str


class Exited(msgspec.Struct, frozen=True, tag="exited"):
    pid: int
    code: int | None
    signal: int | None


Reply = Spawned | SpawnFailed | Exited
_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Request)
reply_decoder = msgspec.msgpack.Decoder(Reply)


def encode(obj: Request | Reply) -> bytes:
    return _encoder.encode(obj)


def request_spawn(server: ForkServerProcess, req: SpawnRequest, output_fd: int) -> None:
    """Ask for a fork whose fds 1 and 2 are `output_fd` (raises OSError: server gone)."""
    socket.send_fds(server.sock, [encode(req)], [output_fd])


def call_hook(server: ForkServerProcess, module: str, function: str) -> bool:
    """Ask the server to run `module.function()` before its next spawn (False: unreachable)."""
    try:
        server.sock.send(encode(HookRequest(module=module, function=function)))
    except OSError:
        return False
    return True


@functools.cache
def _libc() -> ctypes.CDLL:
    # built once, in the server: a CDLL per fork (a new class and a dlopen) cost each child
    # private pages
    return ctypes.CDLL(None, use_errno=True)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    _libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def refuse_dumps() -> None:
    """PR_SET_DUMPABLE 0: the server holds the bundle's keys, and every agent it forks keeps
    the flag: /proc/<pid>/mem, environ and ptrace are the root's only (no-op off Linux)."""
    if sys.platform.startswith("linux"):
        _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def exit_status(status: int) -> tuple[int | None, int | None]:
    """(code, signal) of a wait status."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None


@dataclass(slots=True)
class ForkServerProcess:
    """The daemon's side: the server's pid and our end of the socket pair."""

    pid: int
    sock: socket.socket


def start_fork_server(
    entry_module: str,
    preload: tuple[str, ...] = (),
    close_fds: tuple[int, ...] = (),
    context: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> ForkServerProcess:
    """Fork the server from this (still single-threaded, loop-less) process.

    `close_fds` are closed in the server (e.g. the daemon's pid-file lock); `context` is
    passed as keyword arguments to the entry module's `preload()` hook (e.g. the bundle
    this process already loaded, so children need not load it again); `title` is the server's
    process title."""
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    daemon_pid = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # runs in the fork server
        code = 1
        try:
            parent_end.close()
            for fd in close_fds:
                os.close(fd)
            set_parent_death_signal()
            refuse_dumps()
            if os.getppid() != daemon_pid:
                os._exit(1)
            if title is not None:
                setproctitle.setproctitle(title)
            code = _serve(child_end, entry_module, preload, dict(context or {}))
        finally:
            os._exit(code)
    child_end.close()
    return ForkServerProcess(pid=pid, sock=parent_end)


def _serve(
    sock: socket.socket, entry_module: str, preload: tuple[str, ...], context: dict[str, Any]
) -> int:
    # The terminal's Ctrl-C is for the daemon, which then shuts children down in order.
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    module = importlib.import_module(entry_module)
    for name in preload:
        importlib.import_module(name)
    hook = getattr(module, "preload", None)
    if callable(hook):
        hook(**context)
    entry: Callable[[list[str]], int] = module.main
    gc.collect()
    gc.freeze()
    _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # not inherited: agents adopt nothing
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = _Server(sock, entry, wake_r, wake_w)
    return server.loop()


def _call_hook(req: HookRequest) -> None:
    # what the previous freeze kept out of the collector (e.g. the bundle a reload replaces)
    # can be collected again; without this each reload's garbage in cycles stayed for good
    gc.unfreeze()
    try:
        hook: Callable[[], object] = getattr(importlib.import_module(req.module), req.function)
        hook()
    except Exception:  # the server must keep forking; a child then does the work itself
        import traceback

        traceback.print_exc()
    gc.collect()
    gc.freeze()  # what the hook built stays shared copy-on-write, like the first preload


class _Server:
    def __init__(
        self, sock: socket.socket, entry: Callable[[list[str]], int], wake_r: int, wake_w: int
    ) -> None:
        self.sock = sock
        self.entry = entry
        self.wake_r = wake_r
        self.wake_w = wake_w
        self.forked: set[int] = set()
        """The agents this server forked: the children whose exits the daemon hears of (the
        others are orphans it adopted)."""

    def loop(self) -> int:
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, "sock")
        sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in sel.select():
                if key.data == "wake":
                    self._drain_wakeups()
                    self._reap()
                elif not self._handle_request():
                    return 0

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.forked:
                self.forked.discard(pid)
                code, sig = exit_status(status)
                self._send(encode(Exited(pid=pid, code=code, signal=sig)))

    def _send(self, data: bytes, fds: list[int] | None = None) -> None:
        try:
            if fds:
                socket.send_fds(self.sock, [data], fds)
            else:
                self.sock.send(data)
        except OSError:
            os._exit(0)  # the daemon is gone; PDEATHSIG will follow anyway

    def _handle_request(self) -> bool:
        data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_DATAGRAM, 1)
        if not data:
            return False
        try:
            return self._serve_request(data, fds[0] if fds else None)
        finally:
            for fd in fds:
                os.close(fd)  # a child has its own copy; nothing else may hold the pipe open

    def _serve_request(self, data: bytes, output_fd: int | None) -> bool:
        try:
            req = _request_decoder.decode(data)
        except msgspec.DecodeError:
            return True
        if isinstance(req, HookRequest):
            _call_hook(req)
            return True
        if output_fd is None:
            self._send(encode(SpawnFailed(req_id=req.req_id, message="no output pipe came")))
            return True
        try:
            pid = self._fork(req, output_fd)
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            self._send(encode(SpawnFailed(req_id=req.req_id, message=str(exc))))
            return True
        self._send(encode(Spawned(req_id=req.req_id, pid=pid)), [pidfd])
        os.close(pidfd)
        return True

    def _fork(self, req: SpawnRequest, output_fd: int) -> int:
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # runs in the agent child
            self._become_child(req, output_fd, server_pid)
        self.forked.add(pid)
        return pid

    def _become_child(self, req: SpawnRequest, output_fd: int, server_pid: int) -> None:
        code = 70
        try:
            set_parent_death_signal()
            if os.getppid() != server_pid:
                os._exit(1)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.sock.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(output_fd, 1)
            os.dup2(output_fd, 2)
            os.close(null)
            os.close(output_fd)
            os.environ.update(req.env)
            code = self.entry(req.argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
