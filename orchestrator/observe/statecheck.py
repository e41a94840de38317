"""Which paths under the state root other users can reach (for `goondan doctor`).

The daemon creates everything there 0700/0600 (protocol/private.py); state written by an
older version, by hand or by another tool may be looser. Files inside an instance's workdir
are the tools' own output and are not judged; the workdir itself is.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

GROUP_OTHER = 0o077
WALK_LIMIT = 100_000
"""Entries looked at, at most: doctor must answer quickly on a state root of any size."""


@dataclass(slots=True)
class Exposure:
    loose: list[Path] = field(default_factory=list)
    """Directories or files with any group/other permission bit."""
    readable_secrets: list[Path] = field(default_factory=list)
    """`secrets/*.json` that a group or other users can read."""
    complete: bool = True
    """False when the walk stopped at WALK_LIMIT entries."""


def _is_loose(path: Path) -> bool:
    mode = os.lstat(path).st_mode
    return not stat.S_ISLNK(mode) and bool(mode & GROUP_OTHER)


def scan(root: Path, secrets_dir: Path) -> Exposure:
    found = Exposure()
    if not root.is_dir():
        return found
    seen = 0
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        if _is_loose(here):
            found.loose.append(here)
        if here.name == "workdir":
            dirs.clear()  # the tools' files: theirs to choose
            continue
        for name in files:
            path = here / name
            if _is_loose(path):
                found.loose.append(path)
        seen += len(dirs) + len(files)
        if seen >= WALK_LIMIT:
            found.complete = False
            break
    if secrets_dir.is_dir():
        found.readable_secrets = [
            p for p in sorted(secrets_dir.glob("*.json")) if os.lstat(p).st_mode & 0o044
        ]
    return found
