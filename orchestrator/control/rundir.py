"""The run directory (ARCHITECTURE.md §3): 0700 dir, exclusive pid-file lock, active.json.

One daemon per swarm and state root: the pid file is held with an exclusive `flock` for
the daemon's lifetime, so a second `goondan run` learns at once who holds it (and a lock
left by a dead daemon is released by the kernel, never stale).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import TextIO

import msgspec

from orchestrator.control import locate
from protocol.control import OrchestratorInfo
from protocol.durable import write_atomic
from protocol.endpoints import RunPaths
from protocol.private import DIR_MODE, open_private, private_dir


class AlreadyRunning(Exception):
    def __init__(self, swarm: str, pid: int | None, run_dir: Path) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"swarm {swarm!r} is already running here ({who}, run dir {run_dir}): talk to it "
            f"with `goondan send --swarm {swarm} TEXT`, stop it with `goondan stop --swarm "
            f"{swarm}`, or use another --state-root"
        )
        self.pid = pid


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def acquire(paths: RunPaths, swarm: str) -> TextIO:
    """Create the run dir and take the pid-file lock; raise AlreadyRunning if held."""
    private_dir(paths.run_dir)
    os.chmod(paths.run_dir, DIR_MODE)  # also when it existed: it holds the sockets
    fd = open_private(paths.pid_file, os.O_RDWR)
    handle = os.fdopen(fd, "r+")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = read_pid(paths.pid_file)
        handle.close()
        raise AlreadyRunning(swarm, pid, paths.run_dir) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def write_token(paths: RunPaths) -> str:
    """A fresh control capability for this daemon's life, readable by its user only."""
    import secrets  # the daemon's alone: the CLI imports this module, and secrets loads OpenSSL

    token = secrets.token_hex(32)
    write_atomic(paths.control_token, token.encode())
    return token


def write_active(paths: RunPaths, info: OrchestratorInfo) -> None:
    write_atomic(paths.active_json, msgspec.json.encode(info))


def read_active(path: Path) -> OrchestratorInfo | None:
    """The daemon's `active.json` at `path` (`locate.read_active`, typed); None when it is
    missing or not one."""
    info = locate.read_active(path)
    return msgspec.convert(info, OrchestratorInfo) if info is not None else None


def secure_socket(path: Path) -> None:
    os.chmod(path, 0o600)


def release(paths: RunPaths, lock: TextIO) -> None:
    """Remove what we created; the lock goes with the file descriptor."""
    made = (paths.active_json, paths.agents_sock, paths.control_sock, paths.control_token)
    for path in (*made, paths.pid_file):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    lock.close()
