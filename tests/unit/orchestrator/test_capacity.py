"""Admission at the live-instance bound, and the per-Connection limit on new instances."""

from __future__ import annotations

from orchestrator.ingress.connections import TokenBucket
from orchestrator.supervision import capacity
from orchestrator.supervision.mailboxes import Mailbox
from orchestrator.supervision.states import ProcessStatus as S
from orchestrator.supervision.table import ProcessTable
from protocol.errors import ErrorCode
from protocol.ids import Address, agent_address

PATHS = {
    S.SPAWNING: [S.SPAWNING],
    S.IDLE: [S.SPAWNING, S.IDLE],
    S.PROCESSING: [S.SPAWNING, S.IDLE, S.PROCESSING],
    S.DRAINING: [S.SPAWNING, S.DRAINING],
    S.TERMINATED: [],
}


def table_of(*entries: tuple[str, S, float]) -> ProcessTable:
    """Entries brought to each status through the table's transitions, changed at `changed`."""
    table = ProcessTable()
    for key, status, changed in entries:
        entry = table.entry(agent_address("a", key))
        for step in PATHS[status]:
            table.transition(entry, step, expect=entry.status)
        entry.changed_at = changed
    return table


def cap(table: ProcessTable, limit: int = 2, busy: tuple[str, ...] = ()) -> capacity.Capacity:
    boxes: dict[Address, Mailbox] = {}
    for key in busy:
        boxes[agent_address("a", key)] = box = Mailbox()
        box.queue.append(object())  # type: ignore[arg-type]
    return capacity.Capacity(limit, table, boxes.get)


def test_under_the_bound_an_instance_starts() -> None:
    c = cap(table_of(("x", S.IDLE, 1.0)))
    assert isinstance(capacity.decide(c, agent_address("a", "new")), capacity.Admitted)


def test_at_the_bound_the_least_recently_used_idle_instance_makes_room() -> None:
    c = cap(table_of(("old", S.IDLE, 1.0), ("recent", S.IDLE, 5.0)))
    decision = capacity.decide(c, agent_address("a", "new"))
    assert isinstance(decision, capacity.Evict)
    assert decision.victim.address.instance_key == "old"
    assert list(c.waiting) == [agent_address("a", "new")]


def test_an_idle_instance_with_queued_events_is_not_stopped() -> None:
    c = cap(table_of(("old", S.IDLE, 1.0), ("recent", S.IDLE, 5.0)), busy=("old",))
    decision = capacity.decide(c, agent_address("a", "new"))
    assert isinstance(decision, capacity.Evict)
    assert decision.victim.address.instance_key == "recent"


def test_when_every_instance_is_busy_requests_get_a_coded_error() -> None:
    c = cap(table_of(("x", S.PROCESSING, 1.0), ("y", S.SPAWNING, 2.0)))
    decision = capacity.decide(c, agent_address("a", "new"))
    assert isinstance(decision, capacity.Busy)
    assert decision.error.code == ErrorCode.E_AGENT_CAPACITY


def test_a_slot_on_its_way_is_waited_for_not_taken_twice() -> None:
    c = cap(table_of(("x", S.DRAINING, 1.0), ("y", S.IDLE, 2.0)))
    assert isinstance(capacity.decide(c, agent_address("a", "first")), capacity.Waiting)
    # a second newcomer needs a second slot: the idle one goes
    assert isinstance(capacity.decide(c, agent_address("a", "second")), capacity.Evict)


def test_the_default_bound_follows_the_memory() -> None:
    assert capacity.default_limit(24 << 30) == 1536
    assert capacity.default_limit(64 << 20) == capacity.MIN_DEFAULT


def test_the_new_instance_bucket_refills_over_a_minute() -> None:
    bucket = TokenBucket(4, now=0.0)
    assert [bucket.take(0.0) for _ in range(5)] == [True] * 4 + [False]
    assert not bucket.take(10.0)  # 10 s: 0.67 of a token
    assert bucket.take(15.0)


def test_a_turn_parked_on_its_client_makes_room_like_an_idle_instance() -> None:
    table = table_of(("parked", S.PROCESSING, 1.0), ("idle", S.IDLE, 5.0))
    parked = table.entry(agent_address("a", "parked"))
    table.park(parked, 3.0)  # parked before the other one went idle: it is the older
    decision = capacity.decide(cap(table), agent_address("a", "new"))
    assert isinstance(decision, capacity.Evict)
    assert decision.victim is parked
    # a turn still working (not parked) never makes room
    table.park(parked, None)
    decision = capacity.decide(cap(table), agent_address("a", "new2"))
    assert isinstance(decision, capacity.Evict) and decision.victim.address.instance_key == "idle"
