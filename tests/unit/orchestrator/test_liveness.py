"""Liveness: busy children beat and are answered, idle ones are probed, silence is a wedge."""

from __future__ import annotations

import pytest

from orchestrator.supervision.liveness import (
    KillWedged,
    Probe,
    check,
    on_beat,
    probe_unless_beating,
)
from orchestrator.supervision.settings import Settings
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.ids import Address, ProcessKind, agent_address
from protocol.messages import Heartbeat, HeartbeatPayload, Message

S = ProcessStatus
AGENT = agent_address("coder", "k")
HOOK = Address(kind=ProcessKind.CONNECTOR, name="hook", instance_key="webhook")
SETTINGS = Settings(heartbeat_timeout=20.0, idle_probe_interval=60.0)


class Sent:
    def __init__(self) -> None:
        self.frames: list[Message] = []

    def __call__(self, entry: ProcessEntry, msg: Message) -> bool:
        self.frames.append(msg)
        return True

    def beats(self) -> list[HeartbeatPayload]:
        return [m.payload for m in self.frames if isinstance(m, Heartbeat)]


def _entry(address: Address = AGENT, **fields: object) -> ProcessEntry:
    return ProcessEntry(address=address, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "now", "expected"),
    [
        # processing and beating: silence past the timeout is a wedge
        ({"status": S.PROCESSING, "last_seen": 100.0}, 119.0, None),
        ({"status": S.PROCESSING, "last_seen": 100.0}, 121.0, KillWedged(AGENT, 21.0)),
        # idle: never a wedge for silence alone; probed once it has been silent a while
        ({"status": S.IDLE, "last_seen": 100.0}, 159.0, None),
        ({"status": S.IDLE, "last_seen": 100.0}, 160.0, Probe(AGENT)),
        # a probe out and unanswered past the timeout: wedged
        ({"status": S.IDLE, "last_seen": 100.0, "probed_at": 160.0}, 179.0, None),
        ({"status": S.IDLE, "last_seen": 100.0, "probed_at": 160.0}, 181.0,
         KillWedged(AGENT, 81.0)),
        # the probe was answered (a frame came after it): silent afresh
        ({"status": S.IDLE, "last_seen": 161.0, "probed_at": 160.0}, 200.0, None),
        # a turn parked on its client is silent like an idle process
        ({"status": S.PROCESSING, "last_seen": 100.0, "parked_at": 100.0}, 159.0, None),
        ({"status": S.PROCESSING, "last_seen": 100.0, "parked_at": 100.0}, 160.0, Probe(AGENT)),
    ],
)  # fmt: skip
def test_check(fields: dict[str, object], now: float, expected: object) -> None:
    assert check(_entry(**fields), now, SETTINGS) == expected


def test_a_connector_host_always_beats_so_its_silence_is_a_wedge() -> None:
    hook = _entry(HOOK, status=S.IDLE, last_seen=100.0)
    assert check(hook, 121.0, SETTINGS) == KillWedged(HOOK, 21.0)


def test_a_childs_beat_is_answered_and_an_answer_is_not() -> None:
    entry, sent = _entry(status=S.PROCESSING), Sent()
    on_beat(ProcessTable(), entry, HeartbeatPayload(seq=7, sent_at=1.0), sent)
    on_beat(ProcessTable(), entry, HeartbeatPayload(seq=8, answer=True), sent)
    assert [(b.seq, b.answer) for b in sent.beats()] == [(7, True)]


def test_a_quiet_beat_marks_the_turn_parked_and_the_next_beat_ends_it() -> None:
    entry, sent, table = _entry(status=S.PROCESSING), Sent(), ProcessTable()
    on_beat(table, entry, HeartbeatPayload(seq=1, quiet=True), sent)
    assert entry.parked_at is not None and list(table.parked()) == [entry]
    on_beat(table, entry, HeartbeatPayload(seq=2), sent)
    assert entry.parked_at is None and list(table.parked()) == []


def test_events_for_an_idle_process_come_with_one_probe_until_it_answers() -> None:
    entry, sent = _entry(status=S.IDLE, last_seen=5.0), Sent()
    probe_unless_beating(entry, sent)
    probe_unless_beating(entry, sent)  # one is out already
    assert [b.answer for b in sent.beats()] == [False]
    assert entry.probed_at > entry.last_seen
    busy, quiet = _entry(status=S.PROCESSING), Sent()
    probe_unless_beating(busy, quiet)  # it beats: no need to ask
    assert quiet.frames == []
