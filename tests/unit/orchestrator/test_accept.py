"""The acceptor's order: what a daemon delivers again after a crash goes before what it
accepts meanwhile, even an event submitted before its append is durable."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.ingress.accept import Acceptor
from orchestrator.ingress.journal.sqlite import SqliteJournal
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event
from protocol.ids import Address, agent_address

SOURCE = Source(kind=SourceKind.CLI, name="test")
TARGET = agent_address("worker", "k0")


def event(text: str) -> AgentEvent:
    reply_to = ReplyTo(target="control", correlation_id=text)
    return new_event(type="m", input=text, instance_key="k0", source=SOURCE, reply_to=reply_to)


async def test_events_accepted_while_recovering_go_after_the_redelivered_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ingress.sqlite3"
    submitted: list[str] = []

    def submit(e: AgentEvent, _target: Address, _waiter: object) -> None:
        submitted.append(str(e.input))

    async with asyncio.timeout(10):
        before = await SqliteJournal.open(path)  # what the daemon that died had accepted
        for text in ("old 1", "old 2"):
            await before.append(event(text), str(TARGET))
        await before.close()
        acceptor = Acceptor(await SqliteJournal.open(path), submit)
        recovering = asyncio.ensure_future(acceptor.recover())
        # a send that comes in while the journal is read; it has replyTo and no key, the
        # kind that is submitted before its append is durable
        sending = asyncio.ensure_future(acceptor.accept(event("new"), TARGET))
        await asyncio.gather(recovering, sending)
        await acceptor.close()
    assert submitted == ["old 1", "old 2", "new"]


async def test_recovery_does_not_deliver_again_what_this_daemon_accepted(tmp_path: Path) -> None:
    submitted: list[str] = []

    def submit(e: AgentEvent, _target: Address, _waiter: object) -> None:
        submitted.append(str(e.input))

    async with asyncio.timeout(10):
        acceptor = Acceptor(await SqliteJournal.open(tmp_path / "ingress.sqlite3"), submit)
        await acceptor.accept(event("mine"), TARGET)  # before recover read the journal
        assert await acceptor.recover() == 1  # it is open in the journal, and submitted once
        await acceptor.close()
    assert submitted == ["mine"]


async def test_an_attach_while_the_turn_ends_gets_the_reply(tmp_path: Path) -> None:
    """The turn ends while `attach` reads the journal (which still says open): the reply
    reaches the attached client all the same, not after its timeout."""
    async with asyncio.timeout(10):
        acceptor = Acceptor(await SqliteJournal.open(tmp_path / "ingress.sqlite3"),
                            lambda *_: None)  # fmt: skip
        sent = event("x")
        await acceptor.accept(sent, TARGET)
        attaching = asyncio.ensure_future(acceptor.attach(sent.id))  # asks the journal first
        reply = event("the reply")
        acceptor.finished(sent.id, reply)
        found = await attaching
        assert found is not None
        entry, future = found
        assert (entry.reply if future is None else await future) == reply
        await acceptor.close()


async def test_an_attach_to_an_event_without_reply_ends_with_its_turn(tmp_path: Path) -> None:
    """An event nobody answers (`agents__send`, a webhook `note`): the attached client hears
    that its turn ended, not a timeout."""
    async with asyncio.timeout(10):
        acceptor = Acceptor(await SqliteJournal.open(tmp_path / "ingress.sqlite3"),
                            lambda *_: None)  # fmt: skip
        sent = new_event(type="m", input="note", instance_key="k0", source=SOURCE)
        await acceptor.accept(sent, TARGET)
        found = await acceptor.attach(sent.id)
        assert found is not None and found[1] is not None
        acceptor.finished(sent.id)  # its process reports idle
        assert await found[1] is None
        await acceptor.close()
