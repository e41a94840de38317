"""What Studio shows about a process beside the daemon's table: private memory and uptime, from
/proc (Linux; None elsewhere or for a process that is gone)."""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def uss_bytes(pid: int) -> int | None:
    """Unique set size: the pages only this process has (what it costs on its own)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = 0
    for line in text.splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            kib += int(line.split()[1])
    return kib * 1024


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None


_BOOT = _boot_time()


def uptime_seconds(pid: int, now: float | None = None) -> float | None:
    if _BOOT is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    started = _BOOT + int(stat.rpartition(")")[2].split()[19]) / _TICKS  # field 22: starttime
    return max(0.0, (time.time() if now is None else now) - started)
