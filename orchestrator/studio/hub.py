"""Server-sent events: the process table shared by every open page, and per-page followers.

The process table is asked of the daemon by one poller for all pages (one `status` request a
second while at least one page listens, none otherwise), enriched with USS and start time from
/proc, and pushed only when it changed: an open Studio costs the daemon one cheap request a
second, whatever the number of pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request

from orchestrator.studio.link import DaemonLink
from orchestrator.studio.procinfo import uptime_seconds, uss_bytes

PROCESS_INTERVAL = 1.0
KEEPALIVE = 15.0
"""Seconds between comments on a quiet stream: a closed page is noticed on the next write."""


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def sse_loop(
    request: Request, poll: Callable[[], Awaitable[str | None]], interval: float
) -> AsyncIterator[str]:
    """Yield what `poll` has (at once, then every `interval`) until the page goes away."""
    quiet = 0.0
    while not await request.is_disconnected():
        chunk = await poll()
        if chunk is not None:
            quiet = 0.0
            yield chunk
        elif (quiet := quiet + interval) >= KEEPALIVE:
            quiet = 0.0
            yield ": keepalive\n\n"
        await asyncio.sleep(interval)


class ProcessHub:
    def __init__(self, link: DaemonLink, interval: float = PROCESS_INTERVAL) -> None:
        self.link = link
        self.interval = interval
        self._pages: set[asyncio.Queue[str]] = set()
        self._task: asyncio.Task[None] | None = None
        self._last: str | None = None

    async def snapshot(self) -> dict[str, Any]:
        status = await self.link.status()
        if status is None:
            return {"daemon": None, "processes": []}
        rows = []
        now = time.time()
        for row in msgspec.to_builtins(status.processes):
            pid = row.get("pid")
            uptime = uptime_seconds(pid, now) if pid else None
            row["startedAt"] = None if uptime is None else round(now - uptime, 1)
            uss = uss_bytes(pid) if pid else None
            row["ussMiB"] = None if uss is None else round(uss / (1 << 20), 1)
            rows.append(row)
        return {"daemon": msgspec.to_builtins(status.orchestrator), "processes": rows}

    async def subscribe(self, request: Request) -> AsyncIterator[str]:
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=4)
        self._pages.add(queue)
        if self._last is not None:
            queue.put_nowait(self._last)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._poll())
        try:
            while not await request.is_disconnected():
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        yield await queue.get()
                except TimeoutError:
                    yield ": keepalive\n\n"
        finally:
            self._pages.discard(queue)

    async def _poll(self) -> None:
        while self._pages:
            chunk = sse("processes", await self.snapshot())
            if chunk != self._last:
                self._last = chunk
                for page in list(self._pages):
                    if page.full():  # a page that does not read gets the newest only
                        with contextlib.suppress(asyncio.QueueEmpty):
                            page.get_nowait()
                    page.put_nowait(chunk)
            await asyncio.sleep(self.interval)
        self._last = None
