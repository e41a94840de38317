"""Which deactivated instances the daemon forgets (their state is their files)."""

from __future__ import annotations

from orchestrator.supervision.hibernation import KEEP_MIN, kept, to_forget
from orchestrator.supervision.mailboxes import Mailbox
from orchestrator.supervision.states import ProcessStatus as S
from orchestrator.supervision.table import ProcessEntry
from protocol.events import Source, SourceKind, new_event
from protocol.ids import Address, ProcessKind, agent_address

HOOK = Address(kind=ProcessKind.CONNECTOR, name="hook", instance_key="webhook")


def down(key: str, at: float, **fields: object) -> ProcessEntry:
    return ProcessEntry(address=agent_address("a", key), status=S.TERMINATED, changed_at=at,
                        **fields)  # type: ignore[arg-type]  # fmt: skip


def queued() -> Mailbox:
    box = Mailbox()
    source = Source(kind=SourceKind.CLI, name="t")
    box.queue.append(new_event(type="t", input="x", instance_key="k", source=source))
    return box


def test_the_oldest_deactivated_instances_beyond_the_kept_ones_are_forgotten() -> None:
    entries = [down(f"k{i}", float(i)) for i in (3, 1, 4, 0, 2)]
    assert to_forget(entries, {}, (), keep=2) == [agent_address("a", f"k{i}") for i in (0, 1, 2)]
    assert to_forget(entries, {}, (), keep=5) == []


def test_nothing_owed_anything_is_forgotten() -> None:
    live = ProcessEntry(address=agent_address("a", "live"), status=S.IDLE)
    held = down("held", 0.0, retry_at=99.0)  # startFailed: status must show it
    busy = down("busy", 0.0)
    waits = down("waits", 0.0)
    hook = ProcessEntry(address=HOOK, status=S.TERMINATED)
    entries = [live, held, busy, waits, hook, down("gone", 0.0)]
    mailboxes = {busy.address: queued()}
    chosen = to_forget(entries, mailboxes, {waits.address: None}, keep=0)
    assert chosen == [agent_address("a", "gone")]


def test_at_least_a_thousand_are_kept_and_as_many_as_may_be_live() -> None:
    assert kept(16) == KEEP_MIN
    assert kept(5000) == 5000
