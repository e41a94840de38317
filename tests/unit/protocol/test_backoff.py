"""`protocol.backoff.delay`: the doubling, the cap, absurd attempt counts and the jitter."""

from __future__ import annotations

import pytest

from protocol.backoff import delay


def test_doubles_from_the_first_delay_up_to_the_cap() -> None:
    assert [delay(n, first=0.25, cap=2.0) for n in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_the_cap_holds_over_the_first_delay_too() -> None:
    assert delay(0, first=10.0, cap=3.0) == 3.0


@pytest.mark.parametrize("attempt", [1023, 1024, 10**6, 10**100])
def test_absurd_attempt_counts_give_the_cap_not_an_overflow(attempt: int) -> None:
    assert delay(attempt, first=1.0, cap=300.0) == 300.0


def test_a_tiny_first_delay_still_reaches_a_huge_cap() -> None:
    """No exponent clamp cuts the doubling short of the cap (1e-300 s needs ~2000 doublings)."""
    assert delay(10**6, first=1e-300, cap=1e300) == 1e300


def test_a_negative_attempt_is_the_first() -> None:
    assert delay(-3, first=0.5, cap=30.0) == 0.5


def test_an_integer_cap_still_gives_a_float() -> None:
    got = delay(5, first=1, cap=3)
    assert got == 3.0
    assert isinstance(got, float)


def test_jitter_draws_from_the_upper_half_of_the_delay() -> None:
    draws = [delay(3, first=1.0, cap=60.0, jitter=True) for _ in range(200)]
    assert all(4.0 <= d <= 8.0 for d in draws)
    assert len(set(draws)) > 1  # spread, not one value for every client
    capped = [delay(99, first=1.0, cap=60.0, jitter=True) for _ in range(50)]
    assert all(30.0 <= d <= 60.0 for d in capped)
