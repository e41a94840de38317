"""The journal's writer thread never dies silently (issue 27, F10): a row that does not decode
is quarantined wherever it is read, an operation that fails fails only its caller, and a failed
thread fails every caller and `watch()` instead of leaving them waiting forever."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest
import structlog

from orchestrator.ingress.journal import JournalError
from orchestrator.ingress.journal.sqlite import SqliteJournal
from protocol.errors import ErrorCode
from protocol.events import AgentEvent, Source, SourceKind, new_event

SOURCE = Source(kind=SourceKind.CLI, name="test")
TARGET = "agent:a:k"


def event(text: str = "hi") -> AgentEvent:
    return new_event(type="user.message", input=text, instance_key="k", source=SOURCE)


def corrupt(path: Path, event_id: str, column: str, value: object) -> None:
    """What another writer of the file (anyone running as the daemon's user) may do."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"UPDATE entries SET {column} = ? WHERE event_id = ?", (value, event_id))


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("event", b"\xc1", "event:"),
        ("event", "text, not bytes", "event:"),
        ("event", b"\x81\xa1x\x01", "event:"),  # msgpack, but not an AgentEvent
        ("reply", b"\xc1", "reply:"),
        ("state", 9, "state:"),
        ("state", -1, "state:"),  # open, so pending() reads it
        ("attempts", "many", "attempts:"),
        ("target", b"\x00", "target:"),  # TEXT affinity keeps a blob a blob
    ],
)
async def test_a_row_that_does_not_decode_is_quarantined_and_the_others_are_read(
    tmp_path: Path, column: str, value: object, reason: str
) -> None:
    path = tmp_path / "ingress.sqlite3"
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(path)
        bad, good = event("bad"), event("good")
        await journal.append(bad, TARGET)
        await journal.append(good, TARGET)
        await asyncio.to_thread(corrupt, path, bad.id, column, value)
        with structlog.testing.capture_logs() as logs:
            assert [e.event.id for e in await journal.pending()] == [good.id]
            assert await journal.lookup(bad.id) is None  # a state past 2 is not pending
        assert [e.event.id for e in await journal.pending()] == [good.id]
        await journal.close()
    [line] = [x for x in logs if x["event"] == "journal_row_quarantined"]
    assert line["code"] == ErrorCode.E_JOURNAL_CORRUPT_ROW and line["event_id"] == bad.id
    assert line["reason"].startswith(reason)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        kept = conn.execute("SELECT event_id, reason FROM quarantine").fetchall()
    assert [(event_id, why.split(":")[0] + ":") for event_id, why in kept] == [(bad.id, reason)]


async def test_a_retry_whose_first_event_does_not_decode_is_a_new_event(tmp_path: Path) -> None:
    path = tmp_path / "ingress.sqlite3"
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(path)
        first = event("first")
        await journal.append(first, TARGET, dedupe_key="key-1")
        await asyncio.to_thread(corrupt, path, first.id, "event", b"\xc1")
        retry = await journal.append(event("retry"), TARGET, dedupe_key="key-1")
        assert not retry.duplicate and retry.entry.dedupe_key == "key-1"
        assert [e.event.id for e in await journal.pending()] == [retry.entry.event.id]
        await journal.close()


async def test_an_operation_that_raises_fails_only_its_caller(tmp_path: Path) -> None:
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(tmp_path / "ingress.sqlite3")

        def broken(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM entries")  # undone: the operation failed
            raise KeyError("a bug")

        kept = event("kept")
        await journal.append(kept, TARGET)
        with pytest.raises(JournalError) as raised:
            await journal._submit(broken)
        assert raised.value.code == ErrorCode.E_JOURNAL_FAILED
        after = event("after")
        await journal.append(after, TARGET)  # the thread goes on
        assert [e.event.id for e in await journal.pending()] == [kept.id, after.id]
        await journal.close()


async def test_a_failed_writer_thread_fails_every_caller_and_its_watcher(tmp_path: Path) -> None:
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(tmp_path / "ingress.sqlite3")
        watch = asyncio.ensure_future(journal.watch())
        writer = journal._writer

        def explode() -> None:  # the loop itself fails (not one operation)
            raise MemoryError("the thread's own failure")

        writer._run = lambda batch: explode()  # type: ignore[method-assign]
        with pytest.raises(JournalError) as first:
            await journal.append(event(), TARGET)
        assert first.value.code == ErrorCode.E_JOURNAL_FAILED
        with pytest.raises(JournalError):
            await watch
        with pytest.raises(JournalError):  # at once, not queued for a dead thread
            await journal.append(event(), TARGET)
        await journal.close()  # returns: the failure was reported already
