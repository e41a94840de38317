"""Bounded reads and atomic writes for file-system (paths are already resolved and checked).

Writes go to a temporary file in the same directory and are renamed over the target, so a crash
or a full disk never leaves half a file; `exclusive` writes use link(2), which fails instead of
replacing a file that appeared in the meantime.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundles.sdk import JsonObject, JsonValue, ToolContext, ToolFailed, ToolHandler
from protocol.errors import ErrorCode

BINARY_SNIFF_BYTES = 8192


def too_large(what: str, size: int, limit: int) -> ToolFailed:
    return ToolFailed(
        f"{what} is {size} bytes, over the limit of {limit} bytes",
        code=ErrorCode.E_TOOL_FILE_TOO_LARGE,
        suggestion="Read a line range (start/end), or use bash__exec with head/tail/grep.",
    )


def not_found(shown: str) -> ToolFailed:
    return ToolFailed(
        f"{shown!r} does not exist",
        code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
        suggestion="Check the path with file-system__list or file-system__find.",
    )


def read_text(path: Path, shown: str, *, limit: int) -> str:
    """The file's text (UTF-8, undecodable bytes replaced); refuses directories, binaries and
    files over `limit` bytes."""
    if not path.exists():
        raise not_found(shown)
    if not path.is_file():
        raise ToolFailed(f"{shown!r} is not a regular file", code=ErrorCode.E_TOOL_PATH_WRONG_TYPE)
    size = path.stat().st_size
    if size > limit:
        raise too_large(shown, size, limit)
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # grew since stat
        raise too_large(shown, len(data), limit)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolFailed(
            f"{shown!r} looks like a binary file",
            code=ErrorCode.E_TOOL_BINARY_FILE,
            suggestion="Inspect it with bash__exec (e.g. `file`, `xxd | head`).",
        )
    return data.decode("utf-8", errors="replace")


def _new_file_mode() -> int:
    """The mode `open()` would give a new file. Read from /proc, never by setting the umask:
    the umask is process-wide, and another thread creating a file while it is briefly 0 would
    make that file world-writable."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o600  # no way to know: the private choice


def atomic_write(path: Path, text: str, *, exclusive: bool = False) -> None:
    """Replace (or, with `exclusive`, create) `path` with `text` in one rename."""
    mode = path.stat().st_mode & 0o7777 if path.is_file() else _new_file_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if exclusive:
            os.link(tmp, path)  # FileExistsError if someone created it meanwhile
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def append_text(path: Path, text: str) -> None:
    """Append without following a symlink swapped in after the path was checked."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, _new_file_mode())
    with os.fdopen(fd, "a", encoding="utf-8", newline="") as handle:
        handle.write(text)


def _os_failure(ctx: ToolContext, error: OSError) -> ToolFailed:
    # OS messages name host paths: show the workspace as <workspace> instead.
    reason = error.strerror or str(error)
    reason = reason.replace(os.path.realpath(ctx.workdir), "<workspace>")
    name = errno.errorcode.get(error.errno, "") if error.errno is not None else ""
    return ToolFailed(
        f"file operation failed ({name or type(error).__name__}): {reason}", code=ErrorCode.E_TOOL
    )


def guard_os_errors(handler: Callable[[ToolContext, JsonObject], Any]) -> ToolHandler:
    """Turn unexpected OSErrors (permissions, full disk, cross-device) into coded failures."""
    if inspect.iscoroutinefunction(handler):

        async def run_async(ctx: ToolContext, input: JsonObject) -> JsonValue:
            try:
                return await handler(ctx, input)
            except OSError as error:
                raise _os_failure(ctx, error) from error

        return run_async

    def run(ctx: ToolContext, input: JsonObject) -> JsonValue:
        try:
            return handler(ctx, input)
        except OSError as error:
            raise _os_failure(ctx, error) from error

    return run
