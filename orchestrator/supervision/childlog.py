"""A child's stdout and stderr go through the daemon: one pipe per child, read here.

The child gets the write end of a pipe as its fds 1 and 2; the daemon reads the read end on its
event loop, splits lines, masks the bundle's secrets (`bundles.redact`, the set installed when
the line is written), cuts a line longer than `MAX_LINE` bytes with a marker saying how much was
cut, and appends the lines to the child's log file. So a secret a tool writes in pieces (two
`sys.stderr.write` calls, `os.write(2, ...)`) or from C code is still masked: masking is per
line, after the pieces met. The daemon owns the reader, not the child (which may die in the
middle of a write): a partial last line is written at EOF, and output that arrives after the
child's exit is still written, since EOF comes only when the last holder of the write end
(the child, or a process it started) has closed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import structlog

from bundles import redact
from orchestrator.supervision.logfiles import NEVER, LogFile, Rotation

log = structlog.get_logger("goondan.childlog")

MAX_LINE = 64 << 10
"""Bytes of one line kept in the log; the rest of it is dropped (a tool cannot flood the log
with one endless line, nor hold the daemon's memory with it)."""
READ_CHUNK = 64 << 10
CLOSE_SECONDS = 2.0
"""How long the daemon waits, at exit, for pipes still held open (a stray grandchild)."""


def cut_marker(dropped: int) -> bytes:
    return f" [goondan: line cut, {dropped} more bytes dropped]\n".encode()


class ChildOutput:
    """The read end of one child's pipe and the log file its lines go to."""

    def __init__(self, read_fd: int, log: LogFile, *, max_line: int = MAX_LINE) -> None:
        self._fd = read_fd
        self._log = log
        self.max_line = max_line
        self._partial = bytearray()
        self._dropping: int | None = None
        """Bytes dropped so far of a line that went over `max_line` (None: not cutting)."""
        self._write_failed = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    def open(
        cls, log_path: Path, *, max_line: int = MAX_LINE, rotation: Rotation = NEVER
    ) -> tuple[ChildOutput, int]:
        """A reader appending to `log_path` (rotated by `rotation`), and the write end to give
        the child (close it in the daemon once the child has it). The reader runs until EOF."""
        log_file = LogFile(log_path, rotation)
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(write_fd, True)  # the child's writes block rather than fail
        output = cls(read_fd, log_file, max_line=max_line)
        asyncio.get_running_loop().add_reader(read_fd, output._readable)
        return output, write_fd

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self.feed(data)
        else:
            self.close()

    def feed(self, data: bytes) -> None:
        """Bytes from the pipe: every complete line is written, the rest waits."""
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            self._line_end(data[start : end + 1])
            start = end + 1
        rest = data[start:]
        if self._dropping is not None:
            self._dropping += len(rest)
            return
        self._partial += rest
        self._cut_if_long()

    def _line_end(self, piece: bytes) -> None:
        """`piece` ends a line (with its newline)."""
        if self._dropping is not None:
            self._write(cut_marker(self._dropping + len(piece) - 1))
            self._dropping = None
            return
        if not self._partial:
            line = piece
        else:
            self._partial += piece
            line, self._partial = bytes(self._partial), bytearray()
        if len(line) - 1 > self.max_line:
            masked = redact.current().head(line, self.max_line)
            self._write(masked + cut_marker(len(line) - 1 - self.max_line))
        else:
            self._write(redact.current().json_bytes(line))

    def _cut_if_long(self) -> None:
        """A line over `max_line` without its end yet: write its head once every secret that
        may begin inside the head can be seen whole, then drop the rest of the line."""
        redactor = redact.current()
        if len(self._partial) <= self.max_line + redactor.longest:
            return
        self._write(redactor.head(bytes(self._partial), self.max_line))
        self._dropping = len(self._partial) - self.max_line
        self._partial = bytearray()

    def _write(self, data: bytes) -> None:
        try:
            self._log.write(data)
        except OSError as exc:  # a full disk: say it once, keep draining the pipe
            if not self._write_failed:
                self._write_failed = True
                log.error("child_log_write_failed", error=str(exc))

    def close(self) -> None:
        """EOF (or the daemon is done waiting): the partial last line is written, then both
        ends are closed."""
        if self.closed.done():
            return
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            asyncio.get_running_loop().remove_reader(self._fd)
        if self._dropping is not None:
            self._write(cut_marker(self._dropping))
        elif self._partial:
            self._write(redact.current().json_bytes(bytes(self._partial)) + b"\n")
        self._partial = bytearray()
        os.close(self._fd)
        self._log.close()
        self.closed.set_result(None)


class ChildOutputs:
    """Every open child pipe of the daemon, so that none is lost at exit."""

    def __init__(self, rotation: Rotation = NEVER) -> None:
        self._open: set[ChildOutput] = set()
        self.rotation = rotation

    def open(self, log_path: Path) -> int:
        """Start reading a new child's output into `log_path`; returns the write end."""
        output, write_fd = ChildOutput.open(log_path, rotation=self.rotation)
        self._open.add(output)
        output.closed.add_done_callback(lambda _f: self._open.discard(output))
        return write_fd

    async def close(self) -> None:
        """Wait for the pipes to reach EOF (the children are gone), then close what is left."""
        waiting = [o.closed for o in self._open]
        if waiting:
            await asyncio.wait(waiting, timeout=CLOSE_SECONDS)
        for output in list(self._open):
            output.close()
