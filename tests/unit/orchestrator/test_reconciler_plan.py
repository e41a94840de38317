from __future__ import annotations

from orchestrator.supervision.liveness import KillWedged, Probe
from orchestrator.supervision.mailboxes import Mailbox
from orchestrator.supervision.reconciler import ResumeBackoff, Start, StopIdle, plan
from orchestrator.supervision.settings import Settings
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry
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


def test_an_idle_instance_is_deactivated_after_the_default_ten_minutes() -> None:
    entry = ProcessEntry(address=ADDR, status=S.IDLE, changed_at=0.0, last_seen=590.0)
    assert plan([entry], {}, 599.0, Settings()) == []
    assert plan([entry], {}, 600.0, Settings()) == [StopIdle(ADDR)]
    assert plan([entry], {}, 100.0, Settings(idle_timeout=30.0)) == [StopIdle(ADDR)]
    # null keeps it live (it is only asked now and then whether it is alive)
    assert plan([entry], {}, 10**6, Settings(idle_timeout=None)) == [Probe(ADDR)]


def test_an_idle_instance_with_events_waiting_is_not_deactivated() -> None:
    entry = ProcessEntry(address=ADDR, status=S.IDLE, changed_at=0.0, last_seen=99.0)
    assert plan([entry], {ADDR: _box_with_event()}, 100.0, Settings(idle_timeout=30.0)) == []


def test_a_turn_parked_on_its_client_counts_as_idle_from_when_it_parked() -> None:
    entry = ProcessEntry(address=ADDR, status=S.PROCESSING, changed_at=0.0, last_seen=50.0,
                         parked_at=50.0)  # fmt: skip
    settings = Settings(idle_timeout=30.0)
    assert plan([entry], {}, 79.0, settings) == []
    assert plan([entry], {}, 80.0, settings) == [StopIdle(ADDR)]
    # something queued behind the parked turn: it has work, it stays
    assert plan([entry], {ADDR: _box_with_event()}, 80.0, settings) == []


def test_a_silent_ready_child_is_killed() -> None:
    entry = ProcessEntry(address=ADDR, status=S.PROCESSING, last_seen=0.0)
    assert plan([entry], {}, 11.0, Settings(heartbeat_timeout=10.0)) == [KillWedged(ADDR, 11.0)]


def test_an_unanswered_probe_kills_before_the_idle_timeout_stops() -> None:
    entry = ProcessEntry(address=ADDR, status=S.IDLE, changed_at=0.0, last_seen=0.0,
                         probed_at=70.0)  # fmt: skip
    settings = Settings(idle_timeout=30.0, heartbeat_timeout=10.0)
    assert plan([entry], {}, 81.0, settings) == [KillWedged(ADDR, 81.0)]
