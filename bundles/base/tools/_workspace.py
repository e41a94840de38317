"""Resolve tool paths inside the instance workspace (or the Tool's configured roots).

Shared by `bash`, `file-system` and the chat tools' downloads; loaded by path with
`load_sibling` (bundles/base is not a Python package). A path is first made absolute and
normalized as text (`..` is applied to the text, relative paths start at the first root); one
that is then outside every root is refused with `E_TOOL_PATH_ESCAPE`.

`file-system` goes on with file descriptors (`entry`, `open_dir`, `open_file`): each root is
opened once per call and the rest of the path is resolved beneath it by `_beneath` (openat2
RESOLVE_BENEATH, or an O_NOFOLLOW walk), so a symlink or a directory swapped in between a check
and a use cannot lead outside, and no name is resolved twice. Symlinks that stay inside the
roots are followed; one that leads out is refused like a literal `../`.

`resolve` checks a path by name after `realpath`, with no such guarantee: it serves `bash`'s
cwd and script path (bash is no file-system sandbox) and the chat tools' download targets.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from bundles.sdk import ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _beneath
else:
    _beneath = load_sibling(__file__, "_beneath")

Found = _beneath.Found
_REDIRECTED = {errno.EXDEV, errno.ELOOP, errno.EAGAIN}  # openat2 cannot say: ask the walk
_ROOT_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _escape(raw: str) -> ToolFailed:
    return ToolFailed(
        f"path {raw!r} is outside the workspace",
        code=ErrorCode.E_TOOL_PATH_ESCAPE,
        suggestion="Use a path relative to the workspace root, without '..' leaving it; "
        "symlinks that point outside the workspace are refused too.",
    )


def not_found(shown: str) -> ToolFailed:
    return ToolFailed(
        f"{shown!r} does not exist",
        code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
        suggestion="Check the path with file-system__list or file-system__find.",
    )


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Workspace:
    """The directories a tool may touch; the first root is the base of relative paths.

    Use it as a context manager around the calls that open files: it holds the roots' fds."""

    def __init__(self, roots: Iterable[Path]) -> None:
        given = [os.path.abspath(root) for root in roots]
        if not given:
            raise ValueError("a workspace needs at least one root")
        self.roots = [os.path.realpath(root) for root in given]
        self.base = self.roots[0]
        # A root is known by its real path and by the path it was configured with.
        self._names = sorted(
            {
                (name, index)
                for index, root in enumerate(given)
                for name in (root, self.roots[index])
            },
            key=lambda pair: len(pair[0]),
            reverse=True,
        )
        self._fds: dict[int, int] = {}

    @classmethod
    def from_context(cls, workdir: Path, config: Mapping[str, Any]) -> Workspace:
        """Roots come from `config.roots` (relative ones against the workdir), else the workdir."""
        configured = config.get("roots") or ["."]
        if not isinstance(configured, list) or not all(isinstance(r, str) for r in configured):
            raise ToolFailed("Tool config 'roots' must be a list of directory paths")
        roots = [workdir / root for root in configured]
        for root in roots:
            if not root.is_dir():
                raise ToolFailed(
                    f"workspace root {root} does not exist",
                    code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
                    suggestion="Fix the Tool's config 'roots' or create the directory.",
                )
        return cls(roots)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    # -- paths as text -----------------------------------------------------------------------

    def absolute(self, raw: str) -> str:
        """`raw` made absolute (against the base root) and normalized as text."""
        if "\x00" in raw:
            raise ToolFailed("path contains a NUL byte", code=ErrorCode.E_TOOL_INVALID_ARGS)
        return posixpath.normpath(posixpath.join(self.base, raw or "."))

    def display(self, path: Path | str) -> str:
        """How a path is shown to the model: relative to the base root, never a host path
        when it lies under the base."""
        text = str(path)
        if _is_within(text, self.base):
            rel = os.path.relpath(text, self.base)
            return "." if rel == "." else Path(rel).as_posix()
        return text

    # -- by file descriptor (file-system) ----------------------------------------------------

    def _root_fd(self, index: int) -> int:
        if index not in self._fds:
            self._fds[index] = os.open(self.roots[index], _ROOT_FLAGS)
        return self._fds[index]

    def _locate(self, absolute: str) -> tuple[int, str, list[str]]:
        """(root fd, root's real path, components below it) for a normalized absolute path."""
        for name, index in self._names:
            if _is_within(absolute, name):
                rest = absolute[len(name) :].strip("/")
                return self._root_fd(index), self.roots[index], rest.split("/") if rest else []
        raise _beneath.Escape(absolute)

    def entry(self, raw: str, *, follow_last: bool, make_dirs: bool = False) -> _beneath.Found:
        """The directory entry `raw` names: its parent's fd (yours to close) and its name.

        `follow_last` follows a symlink in the last component (read, write); without it the
        entry is the symlink itself (delete, move). `make_dirs` creates missing parents."""
        absolute = self.absolute(raw)
        with _translated(raw):
            if _beneath.openat2_available():
                found = self._entry_openat2(absolute, follow_last, make_dirs)
                if found is not None:
                    return found
            return _beneath.walk(
                self._locate, absolute, follow_last=follow_last, make_dirs=make_dirs
            )

    def _entry_openat2(
        self, absolute: str, follow_last: bool, make_dirs: bool
    ) -> _beneath.Found | None:
        """The common case in one syscall; None when the walk must decide (a symlink leading
        out of this root, perhaps into another, or a missing parent to make)."""
        root_fd, _, parts = self._locate(absolute)
        if not parts:
            return Found(os.open(".", _ROOT_FLAGS, dir_fd=root_fd), ".")
        try:
            fd = _beneath.openat2(root_fd, "/".join(parts[:-1]) or ".", _ROOT_FLAGS)
        except OSError as error:
            if error.errno in _REDIRECTED or (make_dirs and error.errno == errno.ENOENT):
                return None
            raise
        if follow_last and _beneath.readlink(fd, parts[-1]) is not None:
            os.close(fd)
            return None
        return Found(fd, parts[-1])

    def open_dir(self, raw: str) -> int:
        """An fd of the directory `raw` names (O_RDONLY, for listing), symlinks inside followed;
        E_TOOL_PATH_WRONG_TYPE for anything else."""
        fd = self.open_file(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise ToolFailed(f"{raw!r} is not a directory", code=ErrorCode.E_TOOL_PATH_WRONG_TYPE)
        return fd

    def open_file(self, raw: str, flags: int) -> int:
        """An fd of what `raw` names, opened with `flags`, following symlinks inside the roots."""
        absolute = self.absolute(raw)
        with _translated(raw):
            if _beneath.openat2_available():
                root_fd, _, parts = self._locate(absolute)
                try:
                    return _beneath.openat2(root_fd, "/".join(parts) or ".", flags)
                except OSError as error:
                    if error.errno not in _REDIRECTED:
                        raise
            found = _beneath.walk(self._locate, absolute, follow_last=True, make_dirs=False)
            try:
                return os.open(
                    found.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=found.dir_fd
                )
            finally:
                os.close(found.dir_fd)

    # -- by name (bash, chat downloads) ------------------------------------------------------

    def resolve(self, raw: str) -> Path:
        """The real path `raw` names, following every symlink (also the last component);
        checked by name, so not proof against a swap after the check."""
        real = os.path.realpath(self.absolute(raw))
        if not any(_is_within(real, root) for root in self.roots):
            raise _escape(raw)
        return Path(real)

    def root_of(self, path: Path | str) -> Path:
        """The root that holds `path` (an absolute path inside the roots)."""
        for root in self.roots:
            if _is_within(str(path), root):
                return Path(root)
        raise _escape(str(path))


@contextlib.contextmanager
def _translated(raw: str) -> Iterator[None]:
    """Maps what resolution raises to coded tool errors naming the path as the model gave it."""
    try:
        yield
    except _beneath.Escape:
        raise _escape(raw) from None
    except (FileNotFoundError, NotADirectoryError):
        raise not_found(raw) from None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise ToolFailed(
            f"{raw!r} goes through too many symbolic links (a loop?)",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        ) from None
