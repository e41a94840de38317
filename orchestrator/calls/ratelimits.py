"""Shared rate limits: one bucket per Model (`Model.spec.rateLimit`) for every agent process
that calls it, so N agents together stay under the provider's limit instead of each alone.

`requestsPerMinute` spaces calls evenly: a call may start `60 / rpm` seconds after the one
before (the first at once); a burst waits its turn instead of drawing a provider's 429.
`tokensPerMinute` is a token bucket holding one minute's tokens, refilled continuously: a call
takes its estimated input tokens when it starts, and the difference to what it really used
(input and output) when it ends, so the level may go below zero and later calls wait for the
refill. A provider's 429 drains the bucket for everyone: no call starts before its
`retry-after` has passed, and the token level starts again from zero.

Calls wait in arrival order (FIFO) per Model; `waiting` and `blocked_for` show in
`goondan status`. `Bucket` is pure (time is passed in); `RateLimits` adds the waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bundles.kinds import RateLimit
from protocol.control import ModelLimitInfo


@dataclass(slots=True)
class Bucket:
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    next_at: float = 0.0
    """The earliest time the next call may start (the request spacing)."""
    level: float = 0.0
    updated: float = 0.0
    blocked_until: float = 0.0
    granted: int = 0

    @classmethod
    def of(cls, limit: RateLimit, now: float) -> Bucket:
        level = limit.tokens_per_minute or 0.0
        return cls(limit.requests_per_minute, limit.tokens_per_minute, level=level, updated=now)

    def _refill(self, now: float) -> None:
        if self.tokens_per_minute:
            gained = (now - self.updated) * self.tokens_per_minute / 60
            self.level = min(self.tokens_per_minute, self.level + gained)
        self.updated = now

    def delay(self, estimate: float, now: float) -> float:
        """Seconds until a call of `estimate` tokens may start (0: now)."""
        self._refill(now)
        wait = max(0.0, self.blocked_until - now, self.next_at - now)
        if self.tokens_per_minute:
            need = min(max(estimate, 0.0), self.tokens_per_minute)
            if self.level < need:
                wait = max(wait, (need - self.level) * 60 / self.tokens_per_minute)
        return wait

    def take(self, estimate: float, now: float) -> None:
        self._refill(now)
        if self.requests_per_minute:
            self.next_at = max(self.next_at, now) + 60 / self.requests_per_minute
        if self.tokens_per_minute:
            self.level -= max(estimate, 0.0)
        self.granted += 1

    def settle(self, estimate: float, used: float, now: float) -> None:
        if self.tokens_per_minute:
            self._refill(now)
            self.level -= used - estimate

    def drain(self, retry_after: float | None, now: float) -> None:
        self._refill(now)
        if retry_after:
            self.blocked_until = max(self.blocked_until, now + retry_after)
        self.level = min(self.level, 0.0)
        self.next_at = max(self.next_at, self.blocked_until)


@dataclass(slots=True)
class _Limited:
    bucket: Bucket
    queue: deque[tuple[float, asyncio.Future[None]]] = field(default_factory=deque)
    pump: asyncio.Task[None] | None = None


@dataclass(slots=True)
class RateLimits:
    clock: Callable[[], float] = time.monotonic
    _models: dict[str, _Limited] = field(default_factory=dict)

    def configure(self, limits: Mapping[str, RateLimit]) -> None:
        """The bundle's limits (at start and after a reload); a Model whose limit did not
        change keeps its bucket and its queue."""
        now = self.clock()
        for name in list(self._models):
            if name not in limits:
                self._release(self._models.pop(name))
        for name, limit in limits.items():
            current = self._models.get(name)
            same = current is not None and (
                current.bucket.requests_per_minute,
                current.bucket.tokens_per_minute,
            ) == (limit.requests_per_minute, limit.tokens_per_minute)
            if not same:
                if current is not None:
                    self._release(current)
                self._models[name] = _Limited(Bucket.of(limit, now))

    def acquire(self, model: str, estimate: float) -> asyncio.Future[None] | None:
        """None when the call may start now (the common case, without a task); else a
        future done when it may."""
        limited = self._models.get(model)
        if limited is None:
            return None
        now = self.clock()
        if not limited.queue and limited.bucket.delay(estimate, now) == 0:
            limited.bucket.take(estimate, now)
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        limited.queue.append((estimate, future))
        if limited.pump is None or limited.pump.done():
            limited.pump = asyncio.ensure_future(self._pump(limited))
        return future

    async def _pump(self, limited: _Limited) -> None:
        """Grant the queue in order, each when its bucket has room."""
        while limited.queue:
            estimate, future = limited.queue[0]
            if future.done():  # its caller went away
                limited.queue.popleft()
                continue
            wait = limited.bucket.delay(estimate, self.clock())
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            limited.queue.popleft()
            limited.bucket.take(estimate, self.clock())
            future.set_result(None)

    def settle(self, model: str, estimate: float, used: float) -> None:
        limited = self._models.get(model)
        if limited is not None:
            limited.bucket.settle(estimate, used, self.clock())

    def drain(self, model: str, retry_after: float | None) -> None:
        limited = self._models.get(model)
        if limited is not None:
            limited.bucket.drain(retry_after, self.clock())

    def rows(self) -> list[ModelLimitInfo]:
        now = self.clock()
        return [
            ModelLimitInfo(
                name=name,
                requests_per_minute=m.bucket.requests_per_minute,
                tokens_per_minute=m.bucket.tokens_per_minute,
                waiting=sum(1 for _, f in m.queue if not f.done()),
                blocked_for_seconds=round(max(0.0, m.bucket.blocked_until - now), 3),
                granted=m.bucket.granted,
            )
            for name, m in sorted(self._models.items())
        ]

    def _release(self, limited: _Limited) -> None:
        """A Model whose limit went away or changed: its waiting calls go at once."""
        if limited.pump is not None:
            limited.pump.cancel()
        for _, future in limited.queue:
            if not future.done():
                future.set_result(None)
        limited.queue.clear()

    def close(self) -> None:
        for limited in self._models.values():
            if limited.pump is not None:
                limited.pump.cancel()
