"""Request rates of the `api` connector's clients: a token bucket per bearer token and one per
client address (the address's counts every request, also one with a wrong token, so guessing
tokens is slow too). Over its rate a request is answered 429 with `Retry-After`.

Buckets of clients not seen for a while are forgotten past MAX_BUCKETS (least recently used
first): a forgotten client starts with a full bucket, which is what it would have by then.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

MAX_BUCKETS = 10_000


class Bucket:
    """`per_minute` requests a minute, at most `per_minute` saved up (a burst)."""

    __slots__ = ("_at", "_per_minute", "_tokens")

    def __init__(self, per_minute: float, now: float) -> None:
        self._per_minute = per_minute
        self._tokens = per_minute
        self._at = now

    def take(self, now: float) -> float:
        """0 when a request may go now, else the seconds until it may."""
        self._tokens = min(
            self._per_minute, self._tokens + (now - self._at) * self._per_minute / 60
        )
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) * 60 / self._per_minute


class Rates:
    """The buckets of one kind of client (tokens, or addresses)."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def wait(self, client: str) -> int:
        """0 when `client` may send a request now (it is counted), else the whole seconds to
        wait (Retry-After). A rate of 0 or less is no limit."""
        if self.per_minute <= 0:
            return 0
        now = self._clock()
        bucket = self._buckets.pop(client, None) or Bucket(self.per_minute, now)
        self._buckets[client] = bucket
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
        return math.ceil(bucket.take(now))
