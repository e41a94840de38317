"""Log files that rotate by size: the daemon's `orchestrator.log` and each child's log.

A daemon that runs for months writes gigabytes of log (`bench_instances` prints bytes per event),
so a log file is renamed to `<name>.1` once it reaches `Rotation.max_bytes` (`.1` becomes `.2`,
and so on; the oldest past `keep` is removed) and a new file starts. The daemon is the only
writer of these files (a child's output reaches its file through the daemon, `childlog`), so
no lock is needed; two writers of one child's file (a restarted child while the old pipe still
drains) agree through the file's inode: one that finds its file already renamed reopens.

Readers (`logview`) read a file and its rotated ones as one stream, oldest first.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from bundles.kinds import LogsPolicy
from protocol.private import open_private, private_dir


@dataclass(frozen=True, slots=True)
class Rotation:
    """Rotate a file at `max_bytes` (0: never), keeping `keep` old files."""

    max_bytes: int
    keep: int

    @classmethod
    def of(cls, policy: LogsPolicy) -> Rotation:
        """`Swarm.spec.observability.logs`."""
        return cls(max_bytes=policy.max_file_bytes, keep=policy.keep_files)


NEVER = Rotation(max_bytes=0, keep=0)


def rotated(path: Path, n: int) -> Path:
    """The n-th newest rotated file of `path` (n >= 1)."""
    return path.with_name(f"{path.name}.{n}")


def rotated_index(name: str, base: str) -> int | None:
    """`orchestrator.log.3` of `orchestrator.log` -> 3; None when `name` is no rotated file
    of `base`."""
    head, dot, n = name.rpartition(".")
    if head != base or not dot or not n.isdigit() or n.startswith("0"):
        return None
    return int(n)


def rotated_files(path: Path) -> list[Path]:
    """`path`'s rotated files that exist now, oldest first."""
    base = path.name
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    found = sorted((i, n) for n in names if (i := rotated_index(n, base)) is not None)
    return [path.parent / n for _, n in reversed(found)]


def rotate(path: Path, keep: int) -> None:
    """Shift `path` into its rotated files: .keep goes, .n becomes .n+1, `path` becomes .1
    (with keep 0, `path` goes)."""
    if keep <= 0:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    for n in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.replace(rotated(path, n), rotated(path, n + 1))
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, rotated(path, 1))
    # older rotated files of a larger `keep` than today's (the setting changed): not kept
    n = keep + 1
    while True:
        try:
            rotated(path, n).unlink()
        except FileNotFoundError:
            return
        n += 1


class LogFile:
    """Appends to `path` (owner-only, created with its directory), rotating it at
    `rotation.max_bytes`, only between lines: a line written in pieces (the head of a line
    cut for length, then its marker) is never split across two files."""

    def __init__(self, path: Path, rotation: Rotation = NEVER) -> None:
        self.path = path
        self.rotation = rotation
        private_dir(path.parent)
        self._fd = -1
        self._inode = 0
        self._size = 0
        self._line_open = False
        """The last write did not end its line."""
        self._closed = False
        self._dropping = False
        """Detached: writes go nowhere."""
        self._open()

    def _open(self) -> None:
        self._fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
        st = os.fstat(self._fd)
        self._inode, self._size = st.st_ino, st.st_size

    def fileno(self) -> int:
        return self._fd

    def write(self, data: bytes) -> None:
        """Write all of `data` (raises OSError, e.g. a full disk)."""
        if self._dropping:
            return
        if self._closed:
            raise ValueError(f"{self.path} is closed")
        if self._fd < 0:  # the last reopen failed (e.g. a full disk): try again
            self._open()
        limit = self.rotation.max_bytes
        if limit and self._size and self._size + len(data) > limit and not self._line_open:
            self._rotate()
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except InterruptedError:
                continue
            view = view[written:]
            self._size += written
        if data:
            self._line_open = not data.endswith(b"\n")

    def _rotate(self) -> None:
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = None
        if current == self._inode:
            rotate(self.path, self.rotation.keep)
        # else another writer of this file rotated it already: write to the new one
        os.close(self._fd)
        self._fd = -1
        self._open()

    def detach(self) -> None:
        """In a forked copy of the writer (the fork server, and so every agent): let go of the
        file, and drop what is written to it. An agent holding the daemon's log open could
        write lines into it, and would keep a rotated file's space after the daemon removed
        it."""
        self._dropping = True
        self._release()

    def close(self) -> None:
        self._closed = True
        self._release()

    def _release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
