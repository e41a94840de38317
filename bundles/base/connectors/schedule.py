"""The `schedule` connector: a cron expression in the Connection's config fires events.

    config:
      cron: "0 9 * * 1-5"        # croniter syntax (5 fields; a 6th is seconds)
      timezone: Europe/Berlin    # IANA name; default UTC
      event: schedule            # the event name the ingress rules match
      text: "daily report for {scheduledAt}"   # the input; {scheduledAt} and {missed} filled in
      properties: '{"report": "daily"}'        # a JSON object merged into the properties
      missedRuns: skip           # or catchUpOne: what to do about runs missed while down

Each run is emitted through the Connection's ingress rules with properties `{scheduledAt,
schedule, missed, ...properties}` and the idempotency key `schedule:<scheduledAt>`, so the
daemon journals it like any event and a run emitted twice (a crash between the emit and the
state file) is one event. The time of the last run is saved in `schedule.json` of the
connector's state directory before the run is handed on, so a run is never fired twice.

Runs missed while the daemon (or this connector) was down: `skip` (default) fires none and
waits for the next time; `catchUpOne` fires one run at start for the latest missed time, with
`missed` = how many were missed. A first start (no state yet) misses nothing.

A bad cron expression, time zone, `missedRuns` or `properties` fails the start with
E_CONNECTOR_START_FAILED saying what to fix. The clock is injectable (`Clock`); the variable
`GOONDAN_SCHEDULE_CLOCK="<ISO time> x<rate>"` starts a fake clock at that time running `rate`
times faster than real time (for tests: a day of minutes in seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from bundles.sdk import ConnectorContext, load_sibling

chatbot = load_sibling(__file__, "_chatbot")
CLOCK_ENV = "GOONDAN_SCHEDULE_CLOCK"
MISSED = ("skip", "catchUpOne")
MAX_COUNTED = 10_000
"""Missed runs counted at most: an every-second schedule down for hours stops counting (each
count is a croniter step, ~10 µs, paid before the connector serves)."""


class Clock(Protocol):
    def now(self) -> datetime: ...

    async def sleep_until(self, when: datetime) -> None: ...


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        await asyncio.sleep(max(0.0, (when - self.now()).total_seconds()))


class FastClock:
    """Starts at `start` when first read and runs `rate` times faster than the real monotonic
    clock. First read, not made: at x60 a second between the connector's start and its
    serving (its `ready` handshake, slow on a loaded machine) would be a minute of schedule."""

    __slots__ = ("origin", "rate", "start")

    def __init__(self, start: datetime, rate: float, origin: float | None = None) -> None:
        self.start, self.rate, self.origin = start, rate, origin

    @classmethod
    def parse(cls, text: str) -> FastClock:
        stamp, _, rate = text.strip().partition(" x")
        start = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        return cls(start, float(rate or 1))

    def now(self) -> datetime:
        if self.origin is None:
            self.origin = time.monotonic()
        return self.start + timedelta(seconds=(time.monotonic() - self.origin) * self.rate)

    async def sleep_until(self, when: datetime) -> None:
        await asyncio.sleep(max(0.0, (when - self.now()).total_seconds() / self.rate))


def clock_from_env() -> Clock:
    text = os.environ.get(CLOCK_ENV)
    return FastClock.parse(text) if text else RealClock()


class Settings:
    """The Connection's config, checked (plain class: this file is loaded by path, and a
    dataclass needs its module registered)."""

    __slots__ = ("cron", "event", "missed", "properties", "text", "zone")

    def __init__(
        self,
        cron: str,
        zone: tzinfo,
        event: str,
        text: str,
        properties: dict[str, Any],
        missed: str,
    ) -> None:
        self.cron, self.zone, self.event, self.text = cron, zone, event, text
        self.properties, self.missed = properties, missed

    @classmethod
    def of(cls, config: Any) -> Settings:
        cron = str(config.get("cron", "")).strip()
        if not cron or not croniter.is_valid(cron):
            raise RuntimeError(
                f"the schedule connector's config.cron {cron!r} is not a cron expression; "
                'write five fields: minute hour day-of-month month day-of-week, e.g. "0 9 * * 1-5"'
            )
        name = str(config.get("timezone", "UTC"))
        try:
            zone: tzinfo = UTC if name == "UTC" else ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise RuntimeError(
                f"config.timezone {name!r} is not a time zone; use an IANA name such as "
                "Europe/Berlin, or UTC"
            ) from None
        missed = str(config.get("missedRuns", "skip"))
        if missed not in MISSED:
            raise RuntimeError(f"config.missedRuns {missed!r}: use skip or catchUpOne")
        return cls(cron, zone, str(config.get("event", "schedule")), str(config.get("text", "")),
                   _properties(config.get("properties")), missed)  # fmt: skip


def _properties(raw: Any) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise RuntimeError(f"config.properties is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RuntimeError('config.properties must be a JSON object, e.g. {"report": "daily"}')
    return value


def runs_after(cron: str, after: datetime, zone: tzinfo) -> Iterator[datetime]:
    """The schedule's times strictly after `after`, in `zone`."""
    it = croniter(cron, after.astimezone(zone))
    while True:
        yield it.get_next(datetime)


def missed_runs(
    cron: str, last: datetime, now: datetime, zone: tzinfo
) -> tuple[int, datetime | None]:
    """(how many, capped at MAX_COUNTED; the latest) of the times in (last, now]."""
    count, latest = 0, None
    for at in runs_after(cron, last, zone):
        if at > now:
            return count, latest
        if count == MAX_COUNTED:
            break
        count, latest = count + 1, at
    # capped: the latest is the last run at or before now, not the last one counted
    before = croniter(cron, now.astimezone(zone)).get_prev(datetime)  # strictly before now
    at_now = croniter(cron, before).get_next(datetime)
    return count, at_now if at_now <= now else before


class Schedule:
    def __init__(self, ctx: ConnectorContext, clock: Clock) -> None:
        self.ctx = ctx
        self.clock = clock
        self.settings = Settings.of(ctx.config)
        self.state = chatbot.StateFile(ctx, "schedule.json")
        self.tasks = chatbot.Conversations()

    def _last(self) -> datetime | None:
        raw = self.state.load().get("lastScheduledAt")
        try:
            return datetime.fromisoformat(raw) if isinstance(raw, str) else None
        except ValueError:
            return None

    async def serve(self) -> None:
        settings, now = self.settings, self.clock.now()
        last = self._last()
        if last is not None:
            count, latest = missed_runs(settings.cron, last, now, settings.zone)
            if count:
                self.ctx.logger.info("schedule_missed", missed=count, policy=settings.missed,
                                     last=last.isoformat())  # fmt: skip
            if count and latest is not None and settings.missed == "catchUpOne":
                self.fire(latest, count)
        # from the same `now`: a run due while the missed ones were counted (slow under load)
        # is late, never skipped
        for at in runs_after(settings.cron, now, settings.zone):
            await self.clock.sleep_until(at)
            self.fire(at, 0)

    def fire(self, at: datetime, missed: int) -> None:
        """Save the run's time, then hand the run to the daemon (never twice)."""
        settings = self.settings
        stamp = at.isoformat()
        self.state.save({"lastScheduledAt": stamp})
        props = {**settings.properties, "scheduledAt": stamp, "schedule": settings.cron,
                 "missed": missed}  # fmt: skip
        text = settings.text.replace("{scheduledAt}", stamp).replace("{missed}", str(missed))
        self.ctx.logger.info("schedule_fired", scheduled_at=stamp, missed=missed)
        self.tasks.start(self.emit(settings.event, props, text, f"schedule:{stamp}"))

    async def emit(self, event: str, props: dict[str, Any], text: str, key: str) -> None:
        reply = await self.ctx.emit(event, props, text, idempotency_key=key)
        if reply is not None and reply.error_code is not None:
            self.ctx.logger.error("schedule_run_failed", scheduled_at=props["scheduledAt"],
                                  code=reply.error_code, message=reply.error_message)  # fmt: skip


async def start(ctx: ConnectorContext) -> None:
    """Check the config before `ready`: a bad one is a start error saying what to fix."""
    ctx.state["schedule"] = Schedule(ctx, clock_from_env())


async def run(ctx: ConnectorContext) -> None:
    schedule: Schedule = ctx.state["schedule"]
    try:
        await schedule.serve()
    finally:
        schedule.tasks.cancel()
