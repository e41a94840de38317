from __future__ import annotations

from orchestrator.delivery import Mailbox
from orchestrator.reconciler import KillWedged, ResumeBackoff, Start, StopIdle, plan
from orchestrator.settings import Settings
from orchestrator.states import ProcessStatus
from orchestrator.table import ProcessEntry
from protocol.events import Source, SourceKind, new_event
from protocol.ids import agent_address

S = ProcessStatus
ADDR = agent_address("coder", "k")


def _box_with_event() -> Mailbox:
    box = Mailbox()
    box.queue.append(
        new_event(
            type="t", input="x", instance_key="k", source=Source(kind=SourceKind.CLI, name="t")
        )
    )
    return box


def test_a_stopped_entry_with_queued_events_is_started() -> None:
    entry = ProcessEntry(address=ADDR, status=S.TERMINATED)
    assert plan([entry], {ADDR: _box_with_event()}, 10.0, Settings()) == [Start(ADDR)]


def test_a_held_down_entry_waits_for_its_retry_time() -> None:
    entry = ProcessEntry(address=ADDR, status=S.TERMINATED, retry_at=20.0)
    boxes = {ADDR: _box_with_event()}
    assert plan([entry], boxes, 10.0, Settings()) == []
    assert plan([entry], boxes, 20.0, Settings()) == [Start(ADDR)]


def test_a_lost_backoff_timer_is_resumed_one_interval_late() -> None:
    entry = ProcessEntry(address=ADDR, status=S.CRASH_LOOP_BACKOFF, retry_at=10.0)
    settings = Settings(reconcile_interval=5.0)
    assert plan([entry], {}, 12.0, settings) == []
    assert plan([entry], {}, 15.0, settings) == [ResumeBackoff(ADDR)]


def test_idle_timeout_is_off_by_default_and_stops_idle_children_when_set() -> None:
    entry = ProcessEntry(address=ADDR, status=S.IDLE, changed_at=0.0, last_seen=99.0)
    assert plan([entry], {}, 100.0, Settings()) == []
    assert plan([entry], {}, 100.0, Settings(idle_timeout=30.0)) == [StopIdle(ADDR)]


def test_a_silent_ready_child_is_killed() -> None:
    entry = ProcessEntry(address=ADDR, status=S.PROCESSING, last_seen=0.0)
    assert plan([entry], {}, 11.0, Settings(heartbeat_timeout=10.0)) == [KillWedged(ADDR, 11.0)]
