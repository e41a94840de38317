"""Bounded reads and atomic writes for file-system, on file descriptors from `_workspace`.

Nothing here takes a path: files are read through an fd and written relative to the fd of their
directory, so no name is resolved twice. A regular file with more than one hard link is refused
for reading, appending and editing (`E_TOOL_HARD_LINK`): its other name may lie outside the
workspace, and the same inode would be read or changed there. Replacing it is fine: a write
puts a new file in place of the link and leaves the other name alone.

Writes go to a temporary file in the same directory and are renamed over the target, so a crash
or a full disk never leaves half a file; `exclusive` writes use link(2), which fails instead of
replacing a file that appeared in the meantime.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import secrets
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bundles.sdk import JsonObject, JsonValue, ToolContext, ToolFailed, ToolHandler, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _beneath, _workspace
else:
    _beneath = load_sibling(__file__, "_beneath")
    _workspace = load_sibling(__file__, "_workspace")

BINARY_SNIFF_BYTES = 8192
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # a FIFO must not block the open


def too_large(what: str, size: int, limit: int) -> ToolFailed:
    return ToolFailed(
        f"{what} is {size} bytes, over the limit of {limit} bytes",
        code=ErrorCode.E_TOOL_FILE_TOO_LARGE,
        suggestion="Read a line range (start/end), or use bash__exec with head/tail/grep.",
    )


def wrong_type(shown: str) -> ToolFailed:
    return ToolFailed(f"{shown!r} is not a regular file", code=ErrorCode.E_TOOL_PATH_WRONG_TYPE)


def refuse_hard_links(st: os.stat_result, shown: str) -> None:
    if st.st_nlink > 1:
        raise ToolFailed(
            f"{shown!r} has {st.st_nlink} hard links; file-system does not read or change a "
            "file that has other names, since one of them may lie outside the workspace",
            code=ErrorCode.E_TOOL_HARD_LINK,
            suggestion="Replace it with a file of its own (file-system__write creates a new "
            "file in its place), or copy it with bash if you know where its other names are.",
        )


def read_fd(fd: int, shown: str, *, limit: int) -> str:
    """The text of the open file `fd` (UTF-8, undecodable bytes replaced); refuses anything
    but a regular file with one link, binaries and files over `limit` bytes."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise wrong_type(shown)
    refuse_hard_links(st, shown)
    if st.st_size > limit:
        raise too_large(shown, st.st_size, limit)
    with os.fdopen(os.dup(fd), "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # grew since fstat
        raise too_large(shown, len(data), limit)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolFailed(
            f"{shown!r} looks like a binary file",
            code=ErrorCode.E_TOOL_BINARY_FILE,
            suggestion="Inspect it with bash__exec (e.g. `file`, `xxd | head`).",
        )
    return data.decode("utf-8", errors="replace")


def read_entry(found: _beneath.Found, shown: str, *, limit: int) -> str:
    """`read_fd` of the entry `found` (never through a symlink put there since)."""
    try:
        fd = os.open(found.name, READ_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=found.dir_fd)
    except FileNotFoundError:
        raise _workspace.not_found(shown) from None
    try:
        return read_fd(fd, shown, limit=limit)
    finally:
        os.close(fd)


def lstat_entry(found: _beneath.Found) -> os.stat_result | None:
    """The entry itself (a symlink is not followed), or None when nothing is there."""
    try:
        return os.stat(found.name, dir_fd=found.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


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


def atomic_write(found: _beneath.Found, text: str, *, exclusive: bool = False) -> None:
    """Replace (or, with `exclusive`, create) the entry `found` with `text` in one rename; a
    file keeps its mode, a new one gets the umask's."""
    current = lstat_entry(found)
    is_file = current is not None and stat.S_ISREG(current.st_mode)
    mode = current.st_mode & 0o7777 if current is not None and is_file else _new_file_mode()
    atomic_write_bytes(found, text.encode("utf-8"), mode=mode, exclusive=exclusive)


def atomic_write_bytes(
    found: _beneath.Found, data: bytes, *, mode: int, exclusive: bool = False
) -> None:
    tmp = f".{found.name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=found.dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        folder = found.dir_fd
        if exclusive:  # FileExistsError if someone created it meanwhile
            os.link(tmp, found.name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        else:
            os.rename(tmp, found.name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=found.dir_fd)


def append_text(found: _beneath.Found, text: str, shown: str) -> None:
    """Append to the entry `found`, creating it; never through a symlink, never to a file with
    other hard links, never to anything but a regular file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(found.name, flags, _new_file_mode(), dir_fd=found.dir_fd)
    with os.fdopen(fd, "a", encoding="utf-8", newline="") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise wrong_type(shown)
        refuse_hard_links(st, shown)
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
