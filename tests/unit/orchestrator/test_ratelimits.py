"""The shared rate-limit bucket on a fake clock: spacing, tokens, settling, a 429's drain."""

from __future__ import annotations

import pytest

from bundles.kinds import RateLimit
from orchestrator.calls.ratelimits import Bucket


def test_requests_are_spaced_evenly() -> None:
    bucket = Bucket.of(RateLimit(requests_per_minute=120), now=0.0)
    assert bucket.delay(0, 0.0) == 0
    bucket.take(0, 0.0)
    assert bucket.delay(0, 0.1) == pytest.approx(0.4)
    assert bucket.delay(0, 0.5) == 0
    bucket.take(0, 0.7)  # late: the next one is spaced from now, not from the schedule
    assert bucket.delay(0, 0.7) == pytest.approx(0.5)


def test_tokens_refill_and_settle_with_what_was_used() -> None:
    bucket = Bucket.of(RateLimit(tokens_per_minute=600), now=0.0)  # 10 tokens a second
    assert bucket.delay(500, 0.0) == 0
    bucket.take(500, 0.0)
    assert bucket.delay(500, 0.0) == pytest.approx(40.0)  # 100 left: 400 more in 40 s
    bucket.settle(estimate=500, used=700, now=0.0)  # it used more than estimated: debt
    assert bucket.level == pytest.approx(-100)
    assert bucket.delay(100, 20.0) == pytest.approx(0.0)
    assert bucket.delay(10_000, 100.0) == 0  # a call over the capacity waits for a full bucket


def test_a_429_blocks_everyone_until_retry_after() -> None:
    bucket = Bucket.of(RateLimit(requests_per_minute=6000, tokens_per_minute=6000), now=0.0)
    bucket.drain(3.0, now=1.0)
    assert bucket.delay(0, 1.0) == pytest.approx(3.0)
    assert bucket.delay(0, 4.0) == 0
    assert bucket.level <= 6000
    bucket.drain(None, now=10.0)  # no retry-after: the tokens start again from zero
    assert bucket.delay(100, 10.0) == pytest.approx(1.0)
