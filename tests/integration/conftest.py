"""Integration fixtures: start real daemons and always clean them up."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import pytest

from tests.integration.harness import Daemon

StartDaemon = Callable[..., Awaitable[Daemon]]


LOG_TAIL = 80


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()


def _print_tail(daemon: Daemon) -> None:
    """A failed test shows the end of each daemon's log: the why of a timeout is there."""
    print(f"--- last {LOG_TAIL} log lines of daemon pid {daemon.pid} ---", file=sys.stderr)
    for line in daemon.lines[-LOG_TAIL:]:
        print(json.dumps(line, default=str)[:400], file=sys.stderr)


@pytest.fixture
async def start_daemon(request: pytest.FixtureRequest) -> AsyncIterator[StartDaemon]:
    started: list[Daemon] = []

    async def start(*args: Any, **kwargs: Any) -> Daemon:
        daemon = await Daemon.start(*args, **kwargs)
        started.append(daemon)
        return daemon

    yield start
    if request.node.stash.get(CALL_FAILED, False):
        for daemon in started:
            _print_tail(daemon)
    async with asyncio.timeout(30):
        for daemon in started:
            await daemon.close()
