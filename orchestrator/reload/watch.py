"""`goondan run --watch`: notice edits to the bundle's files and ask for a reload.

A stat-polling watcher: inotify is not in the standard library and a dependency (watchdog,
watchfiles) for a few dozen files is not worth it. Stat-ing that many files every 0.5 s costs
microseconds. A change is reported once the files have been quiet for `debounce` seconds, so
an editor's save (truncate + write + rename) or a `git checkout` of several files causes one
reload, not one per write.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

log = structlog.get_logger("goondan.watch")
Stamp = tuple[int, int, int] | None
"""(mtime_ns, size, inode) of a file, None when it does not exist."""
POLL_INTERVAL = 0.5
DEBOUNCE = 0.3


def stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def stamps(paths: Iterable[Path]) -> dict[Path, Stamp]:
    return {path: stamp(path) for path in paths}


def changed_paths(before: dict[Path, Stamp], now: dict[Path, Stamp]) -> list[Path]:
    """Files whose stamp moved. A path that only just joined the watch list (the bundle after
    a reload names a new prompt file) is a new baseline, not a change."""
    return [path for path, st in now.items() if path in before and before[path] != st]


async def watch_files(
    paths: Callable[[], Iterable[Path]],
    on_change: Callable[[str], None],
    *,
    interval: float = POLL_INTERVAL,
    debounce: float = DEBOUNCE,
) -> None:
    """Poll forever; call `on_change("watch")` after each settled change. `paths` is called
    every round, so the list follows the bundle as reloads swap it."""
    current = stamps(paths())
    log.info("watching", files=len(current), interval=interval, debounce=debounce)
    while True:
        await asyncio.sleep(interval)
        now = stamps(paths())
        moved = changed_paths(current, now)
        if not moved:
            current = now
            continue
        while True:  # wait until the files are quiet for `debounce`
            await asyncio.sleep(debounce)
            later = stamps(paths())
            if later == now:
                break
            now = later
        current = now
        log.info("files_changed", files=[str(p) for p in moved])
        on_change("watch")
