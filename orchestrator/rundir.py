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

from protocol.control import OrchestratorInfo
from protocol.endpoints import RunPaths


class AlreadyRunning(Exception):
    def __init__(self, swarm: str, pid: int | None, run_dir: Path) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"swarm {swarm!r} is already running here ({who}, run dir {run_dir}); "
            f"stop it with `goondan stop --swarm {swarm}` or use another --state-root"
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
    paths.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(paths.run_dir, 0o700)
    fd = os.open(paths.pid_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
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


def write_active(paths: RunPaths, info: OrchestratorInfo) -> None:
    tmp = paths.active_json.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(info))
    os.chmod(tmp, 0o600)
    tmp.replace(paths.active_json)


def read_active(path: Path) -> OrchestratorInfo | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=OrchestratorInfo)
    except (OSError, msgspec.DecodeError):
        return None


def secure_socket(path: Path) -> None:
    os.chmod(path, 0o600)


def release(paths: RunPaths, lock: TextIO) -> None:
    """Remove what we created; the lock goes with the file descriptor."""
    for path in (paths.active_json, paths.agents_sock, paths.control_sock, paths.pid_file):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    lock.close()
