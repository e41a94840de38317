"""Everything the daemon keeps under its state root is private to its owner: directories 0700,
files 0600, whatever the umask.

Conversations, secrets, pending calls and logs are all there. `mkdir(mode=...)` is filtered by
the umask and `parents=True` gives the parents the default mode, so both helpers set the mode
explicitly on what they create. Neither touches the process umask: it is process-wide, and
changing it even briefly races with every other thread that creates a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

DIR_MODE = 0o700
FILE_MODE = 0o600
_P = TypeVar("_P", Path, str)


def private_dir(path: _P) -> _P:
    """`mkdir -p path` where every directory this call creates is 0700; existing ones are left
    as they are (`goondan doctor` reports looser ones).

    The deepest directory is tried first and a parent only when the kernel says it is missing:
    a directory that exists (every call but an instance's first) costs one failing `mkdir`, no
    `stat` and no `Path` per level (this runs in every new agent). A name that is already there
    (a symlink too) is left as it is, to the `open` that follows."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return path
    except FileNotFoundError:
        parent = os.path.dirname(os.fspath(path))
        if not parent or parent == os.fspath(path):
            raise  # a relative path whose working directory is gone
        private_dir(parent)
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            return path  # another process made it first; its creator set its mode
    os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, flags: int) -> int:
    """`os.open(path, flags | O_CREAT)` with the file made 0600 (an existing file is tightened
    to 0600 too: it holds the same kind of data)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd
