"""Open a path beneath a directory fd so that no symlink and no `..` can lead out of it.

A path that was checked by name and then used by name can be swapped between the two (a
directory exchanged for a symlink with renameat2(RENAME_EXCHANGE)). Here names are resolved
once, by the kernel relative to a directory fd, and the caller goes on with fds:

- `openat2(2)` with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS where the kernel has it (Linux
  5.6+; `openat2_available` probes once per process): the kernel itself refuses every step
  out, atomically.
- Elsewhere a walk, one component at a time, each an `O_NOFOLLOW` open relative to the
  directory before it (`walk`): a symlink on the way is never followed by the kernel; it is
  read (readlinkat) and its target resolved again from a root, by the caller's rules.

`open_no_symlinks` refuses every symlink: for paths that came from a directory walk (search,
find), where a symlink can only be one that appeared since.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
# openat2 has number 437 on every architecture that numbers its new syscalls alike.
_SYS_OPENAT2 = 437
_UNIFIED_SYSCALLS = {"x86_64", "aarch64", "armv7l", "armv8l", "riscv64", "ppc64le", "s390x"}
MAX_SYMLINKS = 40  # as the kernel's own limit: more hops is a loop
DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Escape(Exception):
    """The path leads out of every root."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.cache
def _syscall() -> Callable[..., int]:
    call = ctypes.CDLL(None, use_errno=True).syscall
    call.restype = ctypes.c_long
    return call


def openat2(dir_fd: int, path: str, flags: int, mode: int = 0, *, symlinks: bool = True) -> int:
    """openat2(2) beneath `dir_fd`; raises OSError like os.open (EXDEV for a way out)."""
    resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | (0 if symlinks else RESOLVE_NO_SYMLINKS)
    creating = flags & (os.O_CREAT | os.O_TMPFILE)
    how = _OpenHow(flags | os.O_CLOEXEC, mode if creating else 0, resolve)
    fd = _syscall()(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_long(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


@functools.cache
def openat2_available() -> bool:
    """Does this kernel (and seccomp policy) give us openat2? Asked once per process."""
    if os.uname().machine not in _UNIFIED_SYSCALLS:
        return False
    root = os.open("/", DIR_FLAGS)
    try:
        os.close(openat2(root, ".", DIR_FLAGS))
    except OSError:
        return False  # ENOSYS (Linux < 5.6), EPERM (a seccomp filter that does not know it)
    finally:
        os.close(root)
    return True


def readlink(dir_fd: int, name: str) -> str | None:
    """The target of the symlink `name` in `dir_fd`, or None if it is no symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.EINVAL:  # not a symlink
            return None
        raise


def _step(dir_fd: int, name: str, make_dirs: bool) -> int | str:
    """Open the directory `name` in `dir_fd` without following it: its fd, or the target of
    the symlink found there instead."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not make_dirs:
            raise
    except NotADirectoryError:
        target = readlink(dir_fd, name)
        if target is None:
            raise
        return target
    with contextlib.suppress(FileExistsError):  # made meanwhile: as good
        os.mkdir(name, dir_fd=dir_fd)
    return _step(dir_fd, name, make_dirs=False)


@dataclass(frozen=True, slots=True)
class Found:
    """A directory entry reached from a root: `dir_fd` (owned by the caller) and `name` in it
    (`.` when the entry is a root itself)."""

    dir_fd: int
    name: str


Locate = Callable[[str], tuple[int, str, list[str]]]
"""absolute path -> (root fd, root path, components below it); raises Escape."""


def walk(locate: Locate, absolute: str, *, follow_last: bool, make_dirs: bool) -> Found:
    """Resolve the normalized `absolute` path component by component (a root: name ".").

    Every step is an O_NOFOLLOW open relative to the directory before it. A symlink is read and
    its target joined to what is left of the path, and that path is resolved again from a root
    (`locate` raises Escape when it lies outside all of them): symlinks inside the roots are
    followed, one that leads out is refused. Missing directories are made with `make_dirs`."""
    for _hop in range(MAX_SYMLINKS + 1):
        root_fd, here, parts = locate(absolute)
        fd = os.open(".", DIR_FLAGS, dir_fd=root_fd)
        if not parts:
            return Found(fd, ".")  # a root itself (a symlink may lead to one)
        try:
            for index, name in enumerate(parts[:-1]):
                step = _step(fd, name, make_dirs)
                if isinstance(step, str):
                    absolute = posixpath.normpath(posixpath.join(here, step, *parts[index + 1 :]))
                    break
                os.close(fd)
                fd, here = step, posixpath.join(here, name)
            else:
                target = readlink(fd, parts[-1]) if follow_last else None
                if target is None:
                    found, fd = Found(fd, parts[-1]), -1  # the caller's fd now
                    return found
                absolute = posixpath.normpath(posixpath.join(here, target))
        finally:
            if fd >= 0:
                os.close(fd)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), absolute)


def open_no_symlinks(dir_fd: int, rel: str, flags: int) -> int:
    """Open `rel` (relative, without `..`) beneath `dir_fd`; any symlink on the way is refused
    (ELOOP), so the result is what a walk of the tree would have reached."""
    if openat2_available():
        return openat2(dir_fd, rel, flags, symlinks=False)
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise Escape(rel)
    fd = os.open(".", DIR_FLAGS, dir_fd=dir_fd)
    try:
        for name in parts[:-1]:
            step = _step(fd, name, make_dirs=False)
            if isinstance(step, str):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
            os.close(fd)
            fd = step
        return os.open(parts[-1] if parts else ".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
