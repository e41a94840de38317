"""Where this process sits in cgroup v2, and whether that cgroup was delegated to it: read by
the daemon (agents' cgroups, `orchestrator/supervision/cgroups.py`) and by the bash tool (a
cgroup per call, `bundles/base/tools/_contain.py`). Reads only; nothing here writes a cgroup.
In protocol because both sides read delegation the same way and a file loaded by path may
import only bundles.sdk and protocol of ours (stdlib only, like the rest of protocol)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def own_cgroup() -> Path | None:
    """This process's cgroup v2 directory (None on a v1-only system)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    # mountinfo: id parent major:minor root mountpoint options ... - fstype source options
    mount = next((m.split()[4] for m in mounts if " - cgroup2 " in m and m.split()[3] == "/"), None)
    if relative is None or mount is None:
        return None
    return Path(mount + relative.rstrip("/")) if relative != "/" else Path(mount)


def marked_delegated(directory: Path) -> bool:
    """systemd marks a delegated cgroup with a `trusted.delegate` or `user.delegate` xattr; a
    cgroup owned by a non-root process was delegated to it by whoever chowned it."""
    for attribute in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(directory, attribute) == b"1":
                return True
    return os.geteuid() != 0 and directory.stat().st_uid == os.geteuid()
