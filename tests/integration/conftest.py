"""Integration fixtures: start real daemons and always clean them up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.integration.harness import Daemon

StartDaemon = Callable[..., Awaitable[Daemon]]


@pytest.fixture
async def start_daemon() -> AsyncIterator[StartDaemon]:
    started: list[Daemon] = []

    async def start(*args: Any, **kwargs: Any) -> Daemon:
        daemon = await Daemon.start(*args, **kwargs)
        started.append(daemon)
        return daemon

    yield start
    async with asyncio.timeout(30):
        for daemon in started:
            await daemon.close()
