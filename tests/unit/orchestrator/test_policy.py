from __future__ import annotations

import pytest

from bundles.kinds import RestartPolicy
from orchestrator.supervision.policy import (
    ExitKind,
    HoldDown,
    RespawnAfter,
    RespawnNow,
    RestartHistory,
    RestartSettings,
    backoff_delay,
    decide,
)

DEFAULT = RestartSettings()


@pytest.mark.parametrize("crashes", [1, 2, 3, 4, 5])
def test_first_five_crashes_respawn_now(crashes: int) -> None:
    assert decide(RestartHistory(crashes=crashes), ExitKind.CRASH, DEFAULT) == RespawnNow()


def test_backoff_sequence_from_the_sixth_crash() -> None:
    delays = [decide(RestartHistory(crashes=n), ExitKind.CRASH, DEFAULT) for n in range(6, 17)]
    assert delays == [RespawnAfter(d) for d in (1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300)]


def test_huge_crash_counts_stay_at_the_cap() -> None:
    decision = decide(RestartHistory(crashes=10_000), ExitKind.CRASH, DEFAULT)
    assert decision == RespawnAfter(300.0)


def test_settings_come_from_the_swarm_policy() -> None:
    policy = RestartPolicy(immediate_restarts=1, backoff_base_seconds=0.5, backoff_max_seconds=3)
    settings = RestartSettings.from_policy(policy)
    got = [decide(RestartHistory(crashes=n), ExitKind.CRASH, settings) for n in range(1, 7)]
    assert got == [
        RespawnNow(),
        RespawnAfter(0.5),
        RespawnAfter(1.0),
        RespawnAfter(2.0),
        RespawnAfter(3.0),
        RespawnAfter(3.0),
    ]


def test_start_errors_are_held_down_with_growing_delays_never_respawned_at_once() -> None:
    got = [decide(RestartHistory(start_errors=n), ExitKind.START_ERROR, DEFAULT) for n in (1, 2, 3)]
    assert got == [HoldDown(1.0), HoldDown(2.0), HoldDown(4.0)]
    # even on the very first crash count, a start error is not a RespawnNow
    first = decide(RestartHistory(crashes=1, start_errors=1), ExitKind.START_ERROR, DEFAULT)
    assert isinstance(first, HoldDown)


def test_backoff_delay_is_monotonic_and_capped() -> None:
    delays = [backoff_delay(n, DEFAULT) for n in range(1, 40)]
    assert delays == sorted(delays)
    assert max(delays) == DEFAULT.backoff_max


def test_idle_instances_are_deactivated_after_ten_minutes_unless_the_swarm_says_null() -> None:
    from bundles.kinds import LifecyclePolicy, SwarmPolicy
    from orchestrator.supervision.settings import Settings

    assert Settings.from_policy(SwarmPolicy(), env={}).idle_timeout == 600.0
    kept = SwarmPolicy(lifecycle=LifecyclePolicy(idle_timeout_seconds=None))
    assert Settings.from_policy(kept, env={}).idle_timeout is None
    assert Settings.from_policy(SwarmPolicy(), env={}).idle_probe_interval == 60.0
