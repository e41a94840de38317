"""Landlock trampoline for a sandboxed tool where bubblewrap cannot run (`_sandbox`).

Usage: `python -I -S _landlock.py [--no-network] [--read PATH]... [--write PATH]...
[--env NAME=VALUE]... -- ARGV...`: `--read` paths may be read and executed, `--write` paths
also changed; `--no-network`: no TCP bind or connect (Landlock ABI 4+); ARGV gets exactly the
`--env` variables (this process's own environment is the holder's, never the model's). One
argument a path: a long list never meets the kernel's limit of one argument's length.

It sets no-new-privileges, restricts itself with one Landlock
ruleset (whatever is not granted is denied, for this process and all it starts; Landlock ABI
6+ also scopes signals and abstract unix sockets to the sandbox, so the command cannot signal
the agent or the call's reaper) and execs ARGV. Landlock also keeps the command from
ptracing, or reading the memory of, any process outside its sandbox.

Run as a script (stdlib only, `-S`), between the call's holder and the command.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # x86_64 and aarch64 alike
CREATE_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
EXIT_CANNOT_SANDBOX = 126

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_ALL = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_BY_ABI = {1: _ABI1_ALL, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_FS_ALL_LATEST = (1 << 16) - 1  # ABI 5 adds IOCTL_DEV
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # what a file may hold
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def abi() -> int:
    """The Landlock ABI version of this kernel, 0 when it has none (or it is disabled)."""
    version = _libc.syscall(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_VERSION))
    return max(0, int(version))


def _ruleset(version: int, network: bool) -> tuple[int, int]:
    """A new ruleset's fd and the file-system rights it handles."""
    fs = _BY_ABI.get(version, _FS_ALL_LATEST)
    attr = _RulesetAttr(handled_access_fs=fs)
    size = 8
    if version >= 4:
        size = 16
        attr.handled_access_net = 0 if network else NET_BIND_TCP | NET_CONNECT_TCP
    if version >= 6:
        size = 24
        attr.scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL
    fd = _libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    return _check(fd, "landlock_create_ruleset"), fs


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone, or not ours to open: nothing to allow there
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind):
            # /dev/stderr and the like lead to this launcher's own pipes: Landlock names only
            # what a file system holds (EBADFD), and no path reaches them anew in the sandbox
            return
        if not stat.S_ISDIR(kind):
            rights &= _FILE_RIGHTS  # a directory-only right on a file is EINVAL
        rule = _PathBeneath(allowed_access=rights, parent_fd=fd)
        _check(
            _libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0),
            f"landlock_add_rule {path}",
        )
    finally:
        os.close(fd)


def restrict(read: list[str], write: list[str], network: bool) -> None:
    """Apply the grants to this process (and so to everything it execs and starts)."""
    version = abi()
    if version < 1:
        raise OSError(0, "this kernel has no Landlock")
    ruleset, handled = _ruleset(version, network)
    for path in read:
        _allow(ruleset, path, (EXECUTE | READ_FILE | READ_DIR) & handled)
    for path in write:
        _allow(ruleset, path, handled)
    for path in ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty"):
        _allow(ruleset, path, (READ_FILE | WRITE_FILE) & handled)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    _check(_libc.syscall(SYS_RESTRICT, ruleset, 0), "landlock_restrict_self")
    os.close(ruleset)


def parse(args: list[str]) -> tuple[list[str], list[str], bool, dict[str, str], list[str]]:
    """(read, write, network, env, argv) of a command line."""
    grants: dict[str, list[str]] = {"--read": [], "--write": [], "--env": []}
    network, i = True, 0
    while args[i] != "--":
        if args[i] == "--no-network":
            network, i = False, i + 1
            continue
        grants[args[i]].append(args[i + 1])
        i += 2
    env = dict(item.split("=", 1) for item in grants["--env"])
    return grants["--read"], grants["--write"], network, env, args[i + 1 :]


def main(args: list[str]) -> None:
    read, write, network, env, argv = parse(args)
    try:
        restrict(read, write, network)
        os.execvpe(argv[0], argv, env)
    except OSError as error:
        sys.stderr.write(f"sandbox (landlock): {error.strerror or error}\n")
        sys.stderr.flush()
        os._exit(EXIT_CANNOT_SANDBOX)


if __name__ == "__main__":
    main(sys.argv[1:])
