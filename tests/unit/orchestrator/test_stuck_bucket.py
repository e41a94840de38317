"""When a node makes the `nodes` bucket again (orchestrator/cluster/stuck_bucket.py): only after
JetStream has said for `leaderless_for` that its stream has no leader, or that it is gone; the
elections after a reboot are waited out. The deletion itself: tests/cluster/test_stuck_bucket.py."""

from __future__ import annotations

from typing import cast

from orchestrator.cluster.link import Nats
from orchestrator.cluster.stuck_bucket import LEADERLESS_FOR, StuckNodesBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def bucket(clock: Clock) -> StuckNodesBucket:
    return StuckNodesBucket(cast(Nats, object()), ttl=2.0, replicas=3, clock=clock)


def test_a_stream_leaderless_for_less_than_the_bound_is_left_alone() -> None:
    clock = Clock()
    stuck = bucket(clock)
    assert not stuck._stuck("leaderless")
    clock.now += LEADERLESS_FOR - 0.1
    assert not stuck._stuck("leaderless")
    clock.now += 0.1
    assert stuck._stuck("leaderless")


def test_a_leader_seen_between_starts_the_wait_again() -> None:
    clock = Clock()
    stuck = bucket(clock)
    stuck._stuck("leaderless")
    clock.now += LEADERLESS_FOR - 1
    assert not stuck._stuck("led")
    clock.now += 1
    assert not stuck._stuck("leaderless")
    stuck.beat_ok()
    clock.now += LEADERLESS_FOR
    assert not stuck._stuck("leaderless")


def test_a_stream_gone_is_made_again_at_once() -> None:
    assert bucket(Clock())._stuck("gone")


def test_no_look_before_the_beats_have_failed_for_the_bound() -> None:
    clock = Clock()
    stuck = bucket(clock)
    stuck.beat_failed()
    clock.now += stuck.rebuild_after - 0.1
    stuck.beat_failed()
    assert stuck.looked_at is None
    stuck.beat_ok()
    clock.now += stuck.rebuild_after
    stuck.beat_failed()
    assert stuck.looked_at is None and stuck.failing_since == clock.now
