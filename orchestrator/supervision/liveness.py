"""Liveness: which children beat, when a silent one is asked, when silence is a wedge.

A child beats only while it runs a turn that does not wait for its client (agent_process/
link.py); the router answers each beat, which is how the child knows the daemon is there. An
idle child sends nothing and wakes for nothing: at a thousand idle agents, a beat each every
two seconds cost the daemon a tenth of a core and the agents more. Instead the daemon asks a
silent child itself (a `probe`: a heartbeat that wants an answer) now and then
(`Settings.idle_probe_interval`) and whenever it hands it events. Deaths do not need any of
this: exits are seen through pidfds.

The reconciler's rule (`check`, pure) for a process that has said `ready`:
- beating (a connector host, or an agent processing a turn): silent for `heartbeat_timeout`
  -> wedged (its loop is stuck);
- idle, or processing with its turn waiting for a client (it said `quiet`): a probe is out
  and unanswered for `heartbeat_timeout` -> wedged; silent for `idle_probe_interval` ->
  probe it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.supervision.settings import Settings
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.ids import ORCHESTRATOR, Address, ProcessKind
from protocol.messages import Heartbeat, HeartbeatPayload, Message

Send = Callable[[ProcessEntry, Message], bool]


@dataclass(frozen=True, slots=True)
class Probe:
    address: Address


@dataclass(frozen=True, slots=True)
class KillWedged:
    address: Address
    silent_for: float


def on_beat(table: ProcessTable, entry: ProcessEntry, beat: HeartbeatPayload, send: Send) -> None:
    """A heartbeat from the child of `entry` (the frame itself is the sign of life): its own
    beat is answered, an answer to our probe asks for nothing."""
    if beat.answer:
        return
    table.park(entry, time.monotonic() if beat.quiet else None)
    answer = HeartbeatPayload(seq=beat.seq, sent_at=beat.sent_at, answer=True)
    send(entry, Heartbeat(from_=ORCHESTRATOR, to=entry.id_text, payload=answer))


def probe(entry: ProcessEntry, send: Send) -> None:
    """Ask the child of `entry` for a sign of life (its answer is a frame like any other)."""
    entry.probed_at = time.monotonic()
    beat = HeartbeatPayload(seq=0, sent_at=time.time())
    send(entry, Heartbeat(from_=ORCHESTRATOR, to=entry.id_text, payload=beat))


def beats(entry: ProcessEntry) -> bool:
    """Whether the ready child of `entry` beats on its own: a connector host always, an agent
    while it processes a turn that does not wait for its client."""
    if entry.address.kind is ProcessKind.CONNECTOR:
        return True
    return entry.status is ProcessStatus.PROCESSING and entry.parked_at is None


def probe_unless_beating(entry: ProcessEntry, send: Send) -> None:
    """Events were handed to the child of `entry`: if it is not beating and no probe is out,
    ask now, so that a wedged idle process is found when there is work for it."""
    if not beats(entry) and entry.probed_at <= entry.last_seen:
        probe(entry, send)


def check(entry: ProcessEntry, now: float, settings: Settings) -> Probe | KillWedged | None:
    """What the reconciler does about a ready process's silence (see the module docstring)."""
    silent = now - entry.last_seen
    if beats(entry):
        if silent > settings.heartbeat_timeout:
            return KillWedged(entry.address, silent_for=silent)
        return None
    if entry.probed_at > entry.last_seen:  # asked, no answer yet
        if now - entry.probed_at > settings.heartbeat_timeout:
            return KillWedged(entry.address, silent_for=silent)
        return None
    if silent >= settings.idle_probe_interval:
        return Probe(entry.address)
    return None
