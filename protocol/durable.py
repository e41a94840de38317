"""Replacing a state file so that a crash leaves either its old or its new content, never a
torn mix (ARCHITECTURE.md §7: conversation bases, extension state, pending calls, inbox replies,
spawn records). The daemon and its children both write such files."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.private import open_private, private_dir


def write_atomic(path: Path, data: bytes) -> None:
    """Create the parent directory if needed, write a temporary file beside `path`, fsync it,
    rename it over `path` and fsync the directory, so the rename itself survives a power loss.
    The temporary is hidden (`.<name>.tmp`): a reader scanning for real files never sees it.
    The file is 0600 and new directories 0700 (protocol/private.py)."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
