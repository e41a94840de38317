"""The stat-polling watcher: a settled edit is reported once; a new path is a baseline."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from orchestrator.reload.watch import changed_paths, stamps, watch_files


def test_changed_paths_ignores_paths_that_just_joined(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("1")
    before = stamps([a])
    b.write_text("2")
    assert changed_paths(before, stamps([a, b])) == []
    a.write_text("11")
    assert changed_paths(before, stamps([a, b])) == [a]


def test_a_deleted_file_is_a_change(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_text("1")
    before = stamps([a])
    a.unlink()
    assert changed_paths(before, stamps([a])) == [a]


async def test_an_edit_is_reported_after_it_settles(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_text("1")
    seen: asyncio.Queue[str] = asyncio.Queue()
    started = asyncio.Event()

    def paths() -> list[Path]:
        started.set()
        return [a]

    task = asyncio.ensure_future(watch_files(paths, seen.put_nowait, interval=0.01, debounce=0.02))
    try:
        async with asyncio.timeout(10):
            await started.wait()  # the baseline is taken
            a.write_text("12")
            assert await seen.get() == "watch"
            a.write_text("123")
            assert await seen.get() == "watch"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
