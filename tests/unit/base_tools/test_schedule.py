"""The `schedule` connector's pure parts, loaded BY PATH as the daemon loads it: its config
checks (each a start error saying what to fix), missed-run counting, the fake clock."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from .conftest import load_tool

schedule = load_tool("connectors/schedule.py")


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"cron": "every day"}, "five fields"),
        ({}, "five fields"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "IANA"),
        ({"cron": "* * * * *", "missedRuns": "all"}, "skip or catchUpOne"),
        ({"cron": "* * * * *", "properties": "{nope"}, "not JSON"),
        ({"cron": "* * * * *", "properties": "[1]"}, "JSON object"),
    ],
)
def test_bad_config_is_a_start_error_saying_what_to_fix(
    config: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(RuntimeError, match=fragment):
        schedule.Settings.of(config)


def test_settings_defaults_and_a_zone() -> None:
    settings = schedule.Settings.of({"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"})
    assert (settings.event, settings.missed, settings.properties) == ("schedule", "skip", {})
    first = next(
        schedule.runs_after(settings.cron, datetime(2026, 1, 5, tzinfo=UTC), settings.zone)
    )
    assert first.isoformat() == "2026-01-05T09:00:00+01:00"  # 9:00 in Berlin, a Monday


def test_missed_runs_are_counted_and_capped() -> None:
    last = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    now = datetime(2026, 1, 1, 3, 0, 30, tzinfo=UTC)
    count, latest = schedule.missed_runs("* * * * *", last, now, UTC)
    assert (count, latest) == (179, datetime(2026, 1, 1, 3, 0, tzinfo=UTC))
    assert schedule.missed_runs("* * * * *", now, now, UTC) == (0, None)
    many = schedule.missed_runs("* * * * * *", last, datetime(2026, 3, 1, tzinfo=UTC), UTC)
    assert many[0] == schedule.MAX_COUNTED


async def test_the_fast_clock_runs_at_its_rate() -> None:
    clock = schedule.FastClock.parse("2026-01-01T00:00:00Z x3600")
    assert clock.start == datetime(2026, 1, 1, tzinfo=UTC)
    target = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)  # a fake minute: 1/60 s of real time
    async with asyncio.timeout(5):
        await clock.sleep_until(target)
    assert clock.now() >= target


def test_a_capped_count_still_names_the_latest_missed_run() -> None:
    last = datetime(2026, 1, 1, tzinfo=UTC)
    now = datetime(2026, 1, 2, 0, 0, 30, tzinfo=UTC)  # 86,430 every-second runs
    count, latest = schedule.missed_runs("* * * * * *", last, now, UTC)
    assert (count, latest) == (schedule.MAX_COUNTED, now)  # catchUpOne fires this one
    minutes = schedule.missed_runs("*/7 * * * *", datetime(2025, 1, 1, tzinfo=UTC), now, UTC)
    assert minutes == (schedule.MAX_COUNTED, datetime(2026, 1, 2, tzinfo=UTC))
    earlier = schedule.missed_runs("*/7 * * * *", datetime(2025, 1, 1, tzinfo=UTC),
                                   datetime(2026, 1, 1, 23, 59, 59, tzinfo=UTC), UTC)  # fmt: skip
    assert earlier[1] == datetime(2026, 1, 1, 23, 56, tzinfo=UTC)  # minutes 0, 7, .., 56


class _SlowReads:
    """A clock 40 s later at every read: as if counting missed runs took that long."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def now(self) -> datetime:
        self.at += timedelta(seconds=40)
        return self.at - timedelta(seconds=40)

    async def sleep_until(self, when: datetime) -> None:
        await asyncio.sleep(0)


class _Logger:
    def info(self, event: str, **fields: Any) -> None:
        pass

    error = info


async def test_a_run_due_while_missed_runs_are_counted_is_late_not_skipped(
    tmp_path: Path,
) -> None:
    (tmp_path / "schedule.json").write_text('{"lastScheduledAt": "2026-01-01T03:01:00+00:00"}')
    fired: list[str] = []
    done = asyncio.Event()

    async def emit(event: str, props: dict[str, Any], text: str, **_: Any) -> None:
        fired.append(props["scheduledAt"])
        done.set()

    ctx = SimpleNamespace(config={"cron": "* * * * *"}, state_dir=tmp_path, logger=_Logger(),
                          emit=emit)  # fmt: skip
    runner = schedule.Schedule(ctx, _SlowReads(datetime(2026, 1, 1, 6, 0, 30, tzinfo=UTC)))
    task = asyncio.create_task(runner.serve())
    try:
        async with asyncio.timeout(5):
            await done.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert fired[0] == "2026-01-01T06:01:00+00:00"  # skipped (06:02) when the clock was re-read
