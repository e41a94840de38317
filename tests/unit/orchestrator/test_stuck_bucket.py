"""When a node makes a bucket again (orchestrator/cluster/stuck_bucket.py): only after JetStream
has said for `leaderless_for` that its stream has no leader, or that it is gone; the elections
after a reboot are waited out, and the `leases` bucket stays gone for a lease TTL first. The
deletion itself: tests/cluster/test_stuck_bucket.py."""

from __future__ import annotations

from typing import cast

from orchestrator.cluster.link import Nats
from orchestrator.cluster.stuck_bucket import LEADERLESS_FOR, Bucket, StuckBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def bucket(clock: Clock, what: Bucket = "nodes") -> StuckBucket:
    return StuckBucket(cast(Nats, object()), what, ttl=2.0, replicas=3, clock=clock)


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
    stuck.ok()
    clock.now += LEADERLESS_FOR
    assert not stuck._stuck("leaderless")


def test_a_stream_gone_is_made_again_at_once() -> None:
    assert bucket(Clock())._stuck("gone")


def test_no_look_before_the_writes_have_failed_for_the_bound() -> None:
    clock = Clock()
    stuck = bucket(clock)
    stuck.failed()
    clock.now += stuck.rebuild_after - 0.1
    stuck.failed()
    assert stuck.looked_at is None
    stuck.ok()
    clock.now += stuck.rebuild_after
    stuck.failed()
    assert stuck.looked_at is None and stuck.failing_since == clock.now


def test_the_nodes_bucket_is_made_again_as_soon_as_it_is_gone() -> None:
    stuck = bucket(Clock())
    assert stuck._stuck("gone")
    assert stuck._may_create()


def test_the_leases_bucket_stays_gone_for_a_lease_ttl() -> None:
    """A lease renewed by a leader elected between two looks is trusted for less than a TTL
    after that renewal; the stream gone acknowledges nothing more, so a TTL after it is gone no
    lease of it is trusted anywhere."""
    clock = Clock()
    stuck = bucket(clock, "leases")
    assert stuck._stuck("gone")
    assert not stuck._may_create()
    clock.now += stuck.ttl - 0.1
    assert stuck._stuck("gone") and not stuck._may_create()
    clock.now += 0.1
    assert stuck._may_create()


def test_a_leader_seen_or_a_write_answered_starts_the_hold_again() -> None:
    clock = Clock()
    stuck = bucket(clock, "leases")
    stuck._stuck("gone")
    clock.now += stuck.ttl
    assert not stuck._stuck("led")  # another node made it again meanwhile
    assert not stuck._may_create()
    stuck._stuck("gone")
    clock.now += stuck.ttl
    stuck.ok()
    assert not stuck._may_create()
