"""Directory operations of file-system (list, mkdir, delete, move) on directory fds.

Every function gets entries already resolved beneath a root by `_workspace` (a parent fd and a
name) and acts relative to those fds, never by path: a listing opens each subdirectory with
O_NOFOLLOW from its parent's fd, a delete unlinks a name in its parent's fd (a tree through
`shutil.rmtree(dir_fd=...)`, which is fd-based as well), and a move is one renameat(2).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bundles.sdk import ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _beneath, _fileio, _workspace
else:
    _beneath = load_sibling(__file__, "_beneath")
    _fileio = load_sibling(__file__, "_fileio")
    _workspace = load_sibling(__file__, "_workspace")

_SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Listed:
    rel: str
    kind: str  # dir, file, symlink or other
    size: int | None  # files only


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _walk(fd: int, prefix: str, recursive: bool) -> Iterator[Listed]:
    """Sorted, depth first; symlinked directories and .git are listed but not entered."""
    with os.scandir(fd) as scan:
        children = sorted(scan, key=lambda entry: entry.name)
    for child in children:
        try:
            st = child.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # deleted while we listed
        kind = _kind(st.st_mode)
        rel = f"{prefix}{child.name}"
        yield Listed(rel, kind, st.st_size if kind in ("file", "other") else None)
        if recursive and kind == "dir" and child.name != ".git":
            try:
                sub = os.open(child.name, _SUBDIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # replaced (by a symlink, say) since it was listed: not entered
            try:
                yield from _walk(sub, f"{rel}/", recursive)
            finally:
                os.close(sub)


def list_entries(
    fd: int, *, recursive: bool, dirs: bool, files: bool, cap: int
) -> tuple[list[Listed], bool]:
    """Up to `cap` entries under the directory `fd` (dirs and/or everything else)."""
    entries: list[Listed] = []
    for entry in _walk(fd, "", recursive):
        if not (dirs if entry.kind == "dir" else files):
            continue
        if len(entries) == cap:
            return entries, True
        entries.append(entry)
    return entries, False


def make_dir(found: _beneath.Found, raw: str, *, exist_ok: bool) -> bool:
    """mkdir the entry; False if it existed as a directory and `exist_ok`."""
    try:
        os.mkdir(found.name, dir_fd=found.dir_fd)
        return True
    except FileExistsError:
        current = _fileio.lstat_entry(found)
        if current is None or not stat.S_ISDIR(current.st_mode):
            raise ToolFailed(
                f"{raw!r} exists and is not a directory", code=ErrorCode.E_TOOL_PATH_EXISTS
            ) from None
        if exist_ok:
            return False
        raise ToolFailed(
            f"{raw!r} already exists",
            code=ErrorCode.E_TOOL_PATH_EXISTS,
            suggestion="Pass recursive: true to accept an existing directory.",
        ) from None


def _not_a_root(found: _beneath.Found, raw: str) -> None:
    if found.name == ".":
        raise ToolFailed(
            f"{raw!r} is a workspace root",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="Name a file or directory inside the workspace.",
        )


def remove(found: _beneath.Found, raw: str, *, recursive: bool) -> str:
    """Delete the entry (a symlink itself, never its target); returns what it was."""
    _not_a_root(found, raw)
    current = _fileio.lstat_entry(found)
    if current is None:
        raise _workspace.not_found(raw)
    if not stat.S_ISDIR(current.st_mode):
        os.unlink(found.name, dir_fd=found.dir_fd)
        return "symlink" if stat.S_ISLNK(current.st_mode) else "file"
    if recursive:
        shutil.rmtree(found.name, dir_fd=found.dir_fd)
        return "directory"
    try:
        os.rmdir(found.name, dir_fd=found.dir_fd)
    except OSError as error:
        if error.errno != errno.ENOTEMPTY:
            raise
        raise ToolFailed(
            f"directory {raw!r} is not empty",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="Pass recursive: true to delete it with its contents.",
        ) from None
    return "directory"


def move(
    ws: _workspace.Workspace,
    source: _beneath.Found,
    source_raw: str,
    raw: str,
    *,
    overwrite: bool,
) -> None:
    """rename(2) the entry `source` to `raw` (its parents made); a file or symlink is copied
    across file systems. Only a file replaces a file, and only with `overwrite`."""
    _not_a_root(source, source_raw)
    current = _fileio.lstat_entry(source)
    if current is None:
        raise _workspace.not_found(source_raw)
    target = ws.entry(raw, follow_last=False, make_dirs=True)
    try:
        _not_a_root(target, raw)
        existing = _fileio.lstat_entry(target)
        if existing is not None and not (
            overwrite and stat.S_ISREG(current.st_mode) and stat.S_ISREG(existing.st_mode)
        ):
            raise ToolFailed(
                f"{raw!r} already exists",
                code=ErrorCode.E_TOOL_PATH_EXISTS,
                suggestion="Pick another name, or pass overwrite: true to replace a file.",
            )
        _rename(source, target, current, source_raw)
    finally:
        os.close(target.dir_fd)


def _rename(
    source: _beneath.Found, target: _beneath.Found, st: os.stat_result, source_raw: str
) -> None:
    try:
        os.rename(source.name, target.name, src_dir_fd=source.dir_fd, dst_dir_fd=target.dir_fd)
    except OSError as error:
        if error.errno == errno.EINVAL:  # rename(2): a directory made a subdirectory of itself
            raise ToolFailed(
                f"cannot move the directory {source_raw!r} into itself",
                code=ErrorCode.E_TOOL,
                suggestion="Pick a destination outside the directory being moved.",
            ) from None
        if error.errno != errno.EXDEV:
            raise
        _copy_across(source, target, st, source_raw)
        os.unlink(source.name, dir_fd=source.dir_fd)


def _copy_across(
    source: _beneath.Found, target: _beneath.Found, st: os.stat_result, raw: str
) -> None:
    if stat.S_ISLNK(st.st_mode):
        os.symlink(
            os.readlink(source.name, dir_fd=source.dir_fd), target.name, dir_fd=target.dir_fd
        )
        return
    if not stat.S_ISREG(st.st_mode):
        raise ToolFailed(
            "a directory cannot be moved to another file system here",
            code=ErrorCode.E_TOOL,
            suggestion="Move it with bash__exec (mv), or move its files one by one.",
        )
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with os.fdopen(os.open(source.name, flags, dir_fd=source.dir_fd), "rb") as handle:
        _fileio.refuse_hard_links(os.fstat(handle.fileno()), raw)  # a copy would read it
        data = handle.read()
    _fileio.atomic_write_bytes(target, data, mode=st.st_mode & 0o7777)
