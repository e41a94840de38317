from __future__ import annotations

import pytest

from orchestrator.supervision.states import ALLOWED, DOWN, LIVE, ProcessStatus
from orchestrator.supervision.table import ProcessTable, TransitionError
from protocol.ids import agent_address

S = ProcessStatus


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_status_has_a_transition_row_and_groups_partition_them() -> None:
    assert set(ALLOWED) == set(ProcessStatus)
    assert LIVE.isdisjoint(DOWN)
    assert set(ProcessStatus) == LIVE | DOWN


def test_the_seven_wire_names() -> None:
    assert sorted(s.value for s in ProcessStatus) == sorted(
        ["spawning", "idle", "processing", "draining", "terminated", "crashed", "crashLoopBackOff"]
    )


def test_transition_stamps_the_clock_and_tells_the_listener() -> None:
    clock = FakeClock()
    seen: list[tuple[str, S, S]] = []
    table = ProcessTable(clock=clock, listener=lambda e, a, b: seen.append((e.address.name, a, b)))
    entry = table.entry(agent_address("coder", "default"))
    clock.now = 105.0
    table.transition(entry, S.SPAWNING, expect=S.TERMINATED)
    assert entry.status is S.SPAWNING
    assert entry.changed_at == 105.0
    assert seen == [("coder", S.TERMINATED, S.SPAWNING)]


def test_wrong_source_status_is_refused() -> None:
    table = ProcessTable()
    entry = table.entry(agent_address("coder", "default"))
    with pytest.raises(TransitionError, match="expected the source"):
        table.transition(entry, S.IDLE, expect=S.SPAWNING)
    assert entry.status is S.TERMINATED


def test_edge_not_in_the_table_is_refused() -> None:
    table = ProcessTable()
    entry = table.entry(agent_address("coder", "default"))
    with pytest.raises(TransitionError, match="not allowed"):
        table.transition(entry, S.PROCESSING, expect=S.TERMINATED)


def test_a_live_entry_cannot_be_removed() -> None:
    table = ProcessTable()
    address = agent_address("coder", "default")
    entry = table.entry(address)
    table.transition(entry, S.SPAWNING, expect=S.TERMINATED)
    with pytest.raises(TransitionError):
        table.remove(address)
    assert table.get(address) is entry


def test_info_reports_pid_only_while_live() -> None:
    table = ProcessTable()
    entry = table.entry(agent_address("coder", "k:1"))
    entry.pid = 1234
    assert entry.info().pid is None
    table.transition(entry, S.SPAWNING, expect=S.TERMINATED)
    info = entry.info()
    assert (info.pid, info.status, info.instance_key, info.id) == (
        1234,
        "spawning",
        "k:1",
        "agent:coder:k:1:0",
    )


def test_the_table_keeps_its_live_entries_apart_and_remembers_exited_pids() -> None:
    from orchestrator.supervision.table import GONE_PIDS

    table = ProcessTable()
    entry = table.entry(agent_address("a", "k"))
    assert table.live() == []
    table.transition(entry, ProcessStatus.SPAWNING, expect=ProcessStatus.TERMINATED)
    assert table.live() == [entry]
    table.pid_started(4242)
    assert table.had_pid(4242)
    table.transition(entry, ProcessStatus.CRASHED, expect=ProcessStatus.SPAWNING)
    table.pid_gone(4242)
    assert table.live() == [] and table.had_pid(4242)  # its connection closes after its exit
    for pid in range(10_000, 10_000 + GONE_PIDS):
        table.pid_gone(pid)
    assert not table.had_pid(4242)  # only the last GONE_PIDS are kept


def test_idle_entries_are_kept_least_recently_used_first_and_parks_end_with_a_change() -> None:
    table = ProcessTable()
    a, b = table.entry(agent_address("a", "1")), table.entry(agent_address("a", "2"))
    for entry in (a, b):
        table.transition(entry, S.SPAWNING, expect=S.TERMINATED)
        table.transition(entry, S.IDLE, expect=S.SPAWNING)
    assert list(table.idle()) == [a, b]
    table.transition(a, S.PROCESSING, expect=S.IDLE)  # a works again: b is now the oldest
    table.transition(a, S.IDLE, expect=S.PROCESSING)
    assert list(table.idle()) == [b, a]
    table.transition(a, S.PROCESSING, expect=S.IDLE)
    table.park(a, 5.0)
    assert list(table.parked()) == [a] and list(table.idle()) == [b]
    table.transition(a, S.IDLE, expect=S.PROCESSING)  # the turn ended: no longer parked
    assert list(table.parked()) == [] and a.parked_at is None
