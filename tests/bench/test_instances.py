"""bench_instances' drive, small enough for CI (`make test`): virtual actors at scale, checked.

The same drive as `make bench-instances` (tests/bench/instances_driver.py: one real daemon,
distinct instances, one event each, `maxLiveInstances` 300, 32 in flight), with
GOONDAN_TEST_INSTANCES instances (default 20,000, as issue 17 asks of CI) and 20 hibernated
instances of 200 turns woken at the end. One new instance costs a fork, a turn and a
deactivation, about 16 ms of CPU across the daemon, the fork server and the agent, so 20,000
take about three minutes of both cores; the daemon runs without coverage's tracer (see
`drive`). They drive the paths that matter many times over: ~19,700 deactivations at the live
bound and ~18,400 instances forgotten by the daemon (it keeps max(1024, maxLiveInstances)
deactivated ones).

What is checked is what a million instances need, not how fast they went (no timing
asserts; the figures are printed, `-s` shows them): every event answered by its instance, the
live bound held, the daemon's table bounded, no warning or error in its log, and a hibernated
instance leaves only its conversation on disk.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from orchestrator.supervision.hibernation import kept
from tests.bench.baselines import print_rows
from tests.bench.bench_instances import rows
from tests.bench.instances_driver import LIVE, drive

INSTANCES = int(os.environ.get("GOONDAN_TEST_INSTANCES", "20000"))
COLD = 20
CONVERSATION = ["messages", "messages/base.jsonl", "messages/runtime-events.jsonl"]
"""All a driven instance leaves: no empty extensions/ or workdir/, no empty log file."""


# the drive's own bound below is the guard; pytest-timeout's 300 s would cut a slow machine's run
@pytest.mark.timeout(max(300, INSTANCES // 10) + 60)
async def test_thousands_of_instances_through_one_daemon_stay_bounded(tmp_path: Path) -> None:
    async with asyncio.timeout(max(300, INSTANCES / 10)):
        run = await drive(tmp_path, INSTANCES, COLD)
    print_rows(f"instances (CI): {INSTANCES:,} instances, {COLD} hibernated woken", rows(run, []))
    assert len(run.new_ms) == INSTANCES  # the drive checked each reply came from its instance
    assert len(run.cold_ms) == COLD
    assert run.problems == {}, f"the daemon logged warnings or errors: {run.problems}"
    assert 0 < run.most_live <= LIVE
    # the daemon forgot deactivated instances: its table holds the live ones, the last
    # kept() deactivated ones, and what went down since its last sweep (one per reconcile tick)
    if 2 * (kept(LIVE) + LIVE) <= INSTANCES:
        assert run.most_rows < INSTANCES
    assert run.disk is not None and run.disk.instances == INSTANCES
    assert run.disk.sample == CONVERSATION
    assert run.disk.inodes / run.disk.instances < 6  # its directories and the files above
