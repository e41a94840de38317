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

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`mkdir -p path` where every directory this call creates is 0700; existing ones are left
    as they are (`goondan doctor` reports looser ones)."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue  # another process made it first; its creator set its mode
        os.chmod(directory, DIR_MODE)
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
