"""The embedded ingress journal: durable appends, claim/complete, dedupe, compaction, and what a
crash at any point leaves (a writer process SIGKILLed at a random moment, under hypothesis)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.ingress.journal import EntryState, JournalError
from orchestrator.ingress.journal.sqlite import DEDUPE_WINDOW, KEEP_COMPLETED, SqliteJournal
from protocol.errors import ErrorCode
from protocol.events import AgentEvent, Source, SourceKind, new_event

REPO = Path(__file__).resolve().parents[3]
SOURCE = Source(kind=SourceKind.CLI, name="test")


def event(text: str = "hi", key: str = "k") -> AgentEvent:
    return new_event(type="user.message", input=text, instance_key=key, source=SOURCE)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_appended_events_are_pending_in_order_until_completed(tmp_path: Path) -> None:
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(tmp_path / "j" / "ingress.sqlite3")
        first, second, other = event("1"), event("2"), event("3", key="x")
        for e, target in ((first, "agent:a:k"), (second, "agent:a:k"), (other, "agent:a:x")):
            assert not (await journal.append(e, target)).duplicate
        assert [p.event.id for p in await journal.pending()] == [first.id, second.id, other.id]
        assert [p.event for p in await journal.pending("agent:a:k")] == [first, second]
        await journal.claim(first.id)
        claimed = await journal.lookup(first.id)
        assert claimed is not None and (claimed.state, claimed.attempts) == (EntryState.CLAIMED, 1)
        reply = event("answer")
        await journal.complete(first.id, reply)
        done = await journal.lookup(first.id)
        assert done is not None and done.state is EntryState.COMPLETED and done.reply == reply
        assert [p.event.id for p in await journal.pending()] == [second.id, other.id]
        await journal.claim(first.id)  # a late claim never reopens a completed entry
        assert (await journal.lookup(first.id)).state is EntryState.COMPLETED  # type: ignore[union-attr]
        await journal.close()


async def test_a_dedupe_key_maps_a_retry_to_the_first_event(tmp_path: Path) -> None:
    clock = Clock()
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(tmp_path / "ingress.sqlite3", clock)
        first = await journal.append(event("pay"), "agent:a:k", dedupe_key="order-7")
        retry = await journal.append(event("pay"), "agent:a:k", dedupe_key="order-7")
        assert retry.duplicate and retry.entry.event.id == first.entry.event.id
        assert len(await journal.pending()) == 1
        clock.now += DEDUPE_WINDOW + 1
        later = await journal.append(event("pay again"), "agent:a:k", dedupe_key="order-7")
        assert not later.duplicate  # past the window the key starts a new event
        await journal.close()


async def test_compaction_keeps_open_entries_and_recent_replies(tmp_path: Path) -> None:
    clock = Clock()
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(tmp_path / "ingress.sqlite3", clock)
        done, keyed, open_ = event("done"), event("keyed"), event("open")
        await journal.append(done, "agent:a:k")
        await journal.append(keyed, "agent:a:k", dedupe_key="key")
        await journal.append(open_, "agent:a:k")
        await journal.complete(done.id)
        await journal.complete(keyed.id)
        assert await journal.compact() == 0  # replies are kept for attach a while
        clock.now += KEEP_COMPLETED + 1
        assert await journal.compact() == 1  # the keyed one stays for its dedupe window
        assert await journal.lookup(done.id) is None
        assert await journal.lookup(keyed.id) is not None
        assert [p.event.id for p in await journal.pending()] == [open_.id]
        await journal.close()


async def test_many_concurrent_appends_share_commits(tmp_path: Path) -> None:
    async with asyncio.timeout(30):
        journal = await SqliteJournal.open(tmp_path / "ingress.sqlite3")
        events = [event(str(i)) for i in range(500)]
        await asyncio.gather(*(journal.append(e, "agent:a:k") for e in events))
        assert [p.event.id for p in await journal.pending()] == [e.id for e in events]
        assert journal.commits < len(events)  # group commit: not one fsync per event
        await journal.close()


async def test_the_journal_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "ingress.sqlite3"
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(path)
        await journal.append(event(), "agent:a:k")
        await journal.close()
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0


async def test_a_corrupt_journal_stops_with_a_coded_error(tmp_path: Path) -> None:
    path = tmp_path / "ingress.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(JournalError) as info:
        await SqliteJournal.open(path)
    assert info.value.code == ErrorCode.E_JOURNAL_CORRUPT
    assert str(path) in info.value.message


async def test_a_journal_from_a_newer_goondan_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ingress.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(JournalError) as info:
        await SqliteJournal.open(path)
    assert info.value.code == ErrorCode.E_JOURNAL_VERSION


# -- crashes ---------------------------------------------------------------------------------

WRITERS = """
import asyncio, json, os, sys
from pathlib import Path
from orchestrator.ingress.journal.sqlite import SqliteJournal
from protocol.events import Source, SourceKind, new_event

def say(*record):
    sys.stdout.write(json.dumps(record) + "\\n")
    sys.stdout.flush()

async def main(token, path, ops):
    journal = await SqliteJournal.open(Path(path))
    source = Source(kind=SourceKind.CLI, name="crash")
    ids = []
    for op in ops:
        if op == "append":
            e = new_event(type="m", input="x", instance_key="k", source=source)
            await journal.append(e, "agent:a:k")
            ids.append(e.id)
            say(token, "append", e.id)
        elif ids:
            target = ids[len(ids) // 2]
            await (journal.claim(target) if op == "claim" else journal.complete(target))
            say(token, op, target)
    say(token, "end", None)
    await asyncio.sleep(3600)

for line in sys.stdin:
    token, path, *ops = json.loads(line)
    pid = os.fork()
    if pid == 0:
        asyncio.run(main(token, path, ops))
        os._exit(0)
    say(token, "pid", pid)
    os.waitpid(pid, 0)
    say(token, "reaped", pid)
"""
"""Imports once, then forks one writer per example: each writer is still its own process with
its own connection, SIGKILLed by the test; an interpreter and its imports per example were
most of this test's time."""


@pytest.fixture(scope="module")
def writers() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITERS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    yield proc
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()


def _records(proc: subprocess.Popen[str], token: str) -> Iterator[list[str]]:
    """The records of example `token` (a killed writer's earlier lines are skipped)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        record = json.loads(line)
        if record[0] == token:
            yield record[1:]
    raise AssertionError("the writers' process ended")


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.sampled_from(["append", "append", "claim", "complete"]), min_size=1, max_size=40
    ),
    kill_after=st.integers(min_value=0, max_value=40),
)
def test_a_crash_at_any_point_loses_no_acknowledged_write(
    tmp_path_factory: pytest.TempPathFactory,
    writers: subprocess.Popen[str],
    ops: list[str],
    kill_after: int,
) -> None:
    """SIGKILL the writer after `kill_after` acknowledged operations (while later ones may be
    mid-commit): every acknowledged append is there, every acknowledged completion holds, and
    the journal opens cleanly."""
    path = tmp_path_factory.mktemp("crash") / "ingress.sqlite3"
    token = path.parent.name
    assert writers.stdin is not None
    writers.stdin.write(json.dumps([token, str(path), *ops]) + "\n")
    writers.stdin.flush()
    records = _records(writers, token)
    kind, pid = next(records)
    assert kind == "pid"
    acked: list[list[str]] = []
    try:
        for record in records:
            assert record[0] != "reaped", "the writer died before it was killed"
            if record[0] == "end":
                break
            acked.append(record)
            if len(acked) >= kill_after:
                break
    finally:
        os.kill(int(pid), signal.SIGKILL)
        for record in records:  # the writer is dead once its parent has reaped it
            if record[0] == "reaped":
                break

    async def check() -> None:
        journal = await SqliteJournal.open(path)
        try:
            for op, event_id in acked:
                entry = await journal.lookup(event_id)
                assert entry is not None, f"acknowledged {op} of {event_id} was lost"
                if op == "complete":
                    assert entry.state is EntryState.COMPLETED
                if op == "claim":
                    assert entry.state >= EntryState.CLAIMED
            appended = [event_id for op, event_id in acked if op == "append"]
            pending = [p.event.id for p in await journal.pending()]
            assert pending == sorted(pending, key=[*appended, *pending].index)  # still in order
        finally:
            await journal.close()

    asyncio.run(asyncio.wait_for(check(), 30))


async def test_an_open_cancelled_mid_way_closes_the_connection_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon stopped while its journal opens (the open runs in a thread that cannot be
    stopped) does not leave the connection that thread still makes open."""
    from orchestrator.ingress.journal import sqlite as journal_sqlite

    release, made = asyncio.Event(), asyncio.Event()
    opened: list[sqlite3.Connection] = []
    loop = asyncio.get_running_loop()
    real_open = journal_sqlite._open

    def held_open(path: Path) -> tuple[sqlite3.Connection, bytes | None, bool]:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=10)
        result = real_open(path)
        opened.append(result[0])
        loop.call_soon_threadsafe(made.set)
        return result

    monkeypatch.setattr(journal_sqlite, "_open", held_open)
    task = asyncio.create_task(SqliteJournal.open(tmp_path / "journal.db"))
    await asyncio.sleep(0)  # the open is under way in its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await task
    release.set()
    async with asyncio.timeout(10):
        await made.wait()
        while True:  # closed by the open's done callback, on this loop
            try:
                opened[0].execute("SELECT 1")
            except sqlite3.ProgrammingError:
                break
            await asyncio.sleep(0.01)
