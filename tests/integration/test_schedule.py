"""The `schedule` connector through a real daemon, under a fake clock and after downtime.

`GOONDAN_SCHEDULE_CLOCK="<time> x60"` starts the connector's clock at that time, running 60
times faster than real time: the every-minute schedule fires once a real second. The agent
answers each run, so its conversation holds the runs' inputs (`tick <scheduledAt> missed
<n>`), in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli

BUNDLE = REPO / "tests" / "fixtures" / "schedule"
SWARM = "sched"
CLERK = "agent:clerk:ticks"


async def start(start_daemon: StartDaemon, at: str, missed: str = "skip") -> Daemon:
    env = {"GOONDAN_SCHEDULE_CLOCK": f"{at} x60", "MISSED_RUNS": missed}
    return await start_daemon(BUNDLE, swarm=SWARM, env=env)


async def turns(daemon: Daemon, count: int, since: int = 0) -> int:
    """Wait until the clerk ended `count` turns after `since`; the log index after the last."""
    index = since
    for _ in range(count):
        line = await daemon.wait_for("transition", index, source="processing", target="idle")
        assert line["process"].startswith(CLERK)
        index = daemon.lines.index(line) + 1
    return index


def inputs() -> list[str]:
    path = StateLayout.from_env().instance_paths(SWARM, "ticks", "clerk").base_jsonl
    messages = [json.loads(line) for line in path.read_text().splitlines()]
    return [m["content"] for m in messages if m["role"] == "user"]


async def stop(daemon: Daemon) -> None:
    code, _, err = await run_cli("stop")
    assert code == 0, err
    assert await daemon.wait() == 0


async def test_fires_each_minute_under_a_fake_clock_and_journals_each_run(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon, "2026-01-01T00:00:30Z")
        await turns(daemon, 3)
        await stop(daemon)
    assert inputs()[:3] == [
        "tick 2026-01-01T00:01:00+00:00 missed 0",
        "tick 2026-01-01T00:02:00+00:00 missed 0",
        "tick 2026-01-01T00:03:00+00:00 missed 0",
    ]
    journal = StateLayout.from_env().journal_file(SWARM)
    with contextlib.closing(sqlite3.connect(journal)) as db:
        keys = {k for (k,) in db.execute("SELECT dedupe_key FROM entries")}
    assert "every-minute:schedule:2026-01-01T00:01:00+00:00" in keys


async def test_missed_runs_after_downtime_catch_up_one_or_skip(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        first = await start(start_daemon, "2026-01-01T00:00:50Z")
        await turns(first, 1)
        await stop(first)
        assert inputs()[0] == "tick 2026-01-01T00:01:00+00:00 missed 0"
        # a minute is a second here: on a busy machine the 00:02 run may fire before the stop
        state = StateLayout.from_env().connector_state_dir(SWARM, "every-minute")
        last = datetime.fromisoformat(json.loads((state / "schedule.json").read_text())
                                      ["lastScheduledAt"])  # fmt: skip
        missed = int((datetime(2026, 1, 1, 3, tzinfo=UTC) - last).total_seconds()) // 60
        assert 170 <= missed <= 179  # 00:02 .. 03:00, less what fired before the stop
        seen = len(inputs())

        # down for three hours; catchUpOne: one run at start for the latest missed time
        second = await start(start_daemon, "2026-01-01T03:00:30Z", "catchUpOne")
        await turns(second, 2)
        await stop(second)
        assert inputs()[seen : seen + 2] == [
            f"tick 2026-01-01T03:00:00+00:00 missed {missed}",  # (last run, 03:00]
            "tick 2026-01-01T03:01:00+00:00 missed 0",
        ]

        # down again; skip (the default): nothing at start, the next run on time
        seen = len(inputs())
        third = await start(start_daemon, "2026-01-01T06:00:30Z", "skip")
        await turns(third, 1)
        await stop(third)
    assert inputs()[seen] == "tick 2026-01-01T06:01:00+00:00 missed 0"  # 06:02 may follow
    assert not any("T06:00:00" in text for text in inputs())


async def test_a_bad_cron_expression_fails_the_start(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    bundle = tmp_path / "bad"
    bundle.mkdir()
    text = (BUNDLE / "goondan.yaml").read_text().replace('cron: "* * * * *"', 'cron: "every day"')
    (bundle / "goondan.yaml").write_text(text)
    async with asyncio.timeout(60):
        daemon = await start_daemon(bundle, swarm=SWARM, env={"MISSED_RUNS": "skip"})
        # any generation: an exit seen before the first one's frame makes that frame stale
        line = await daemon.wait_for("start_error", code="E_CONNECTOR_START_FAILED")
        # at the daemon's start a Connection that cannot start is a configuration error: the
        # daemon stops with exit 2 instead of retrying it every second
        assert await daemon.wait() == 2
    assert line["process"].startswith("connector:every-minute:schedule:")
    assert "cron" in line["message"]
    [refused] = daemon.find("connection_cannot_start")
    assert (refused["connection"], refused["code"]) == ("every-minute", "E_CONNECTOR_START_FAILED")


async def test_run_input_starts_no_connector(tmp_path: Path) -> None:
    """`run --input` answers one input through the control socket: a Connection it does not
    need (here one whose config is broken) is not started, so it logs no start errors."""
    bundle = tmp_path / "bad"
    bundle.mkdir()
    text = (BUNDLE / "goondan.yaml").read_text().replace('cron: "* * * * *"', 'cron: "every day"')
    (bundle / "goondan.yaml").write_text(text)
    async with asyncio.timeout(60):
        code, out, err = await run_cli(
            "run", str(bundle), "--input", "hi", "--log-format", "json",
            env={"MISSED_RUNS": "skip"},
        )  # fmt: skip
    assert code == 0, err
    assert "start_error" not in out + err and "E_CONNECTOR_START_FAILED" not in out + err
