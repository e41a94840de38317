"""Deleting an instance's directory tree from the event loop.

`shutil.rmtree` of a long conversation blocks for as long as the disk takes, so the tree is
first renamed aside (one syscall, so the path is gone at once and a process spawned right after
starts fresh, never inside a half-deleted tree), then deleted in a worker thread. The aside
name holds a `#`, which `protocol.endpoints.path_segment` always escapes: it never collides
with an instance or agent directory, and listings skip it (`is_aside`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from pathlib import Path

_ASIDE = "#deleting-"


def is_aside(name: str) -> bool:
    """A tree being deleted (or left by a daemon that died while deleting it)."""
    return _ASIDE in name


async def remove_tree(path: Path) -> None:
    """Remove `path` and everything under it; a missing path is fine."""
    aside = path.with_name(f"{path.name}{_ASIDE}{secrets.token_hex(4)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    except OSError:  # e.g. the longer name is over the file system's limit: delete in place
        aside = path
    await asyncio.to_thread(shutil.rmtree, aside, ignore_errors=True)
