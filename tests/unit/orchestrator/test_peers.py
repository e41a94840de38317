"""`peers._credentials` reads who is at the other end of an accepted connection. The monitor
reports accepts late, so the fd may be closed or reused by a pipe by then: never an error."""

from __future__ import annotations

import os
import socket

from orchestrator.routing.peers import _credentials


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_unix_connection_gives_its_peer() -> None:
    left, right = socket.socketpair()
    with left, right:
        assert _credentials(left.fileno()) == (os.getpid(), os.getuid())


def test_an_fd_reused_by_a_pipe_is_unknown_and_leaks_nothing() -> None:
    read, write = os.pipe()
    try:
        before = _open_fds()
        assert _credentials(read) is None  # was: OSError ENOTSOCK, which stopped the daemon
        assert _open_fds() == before
    finally:
        os.close(read)
        os.close(write)


def test_a_closed_fd_is_unknown() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    assert _credentials(read) is None
