"""The embedded journal: one SQLite file per swarm (WAL, `synchronous=FULL`), written by one
thread with group commit.

Every operation the event loop asks for goes on a queue; the writer thread takes everything
queued, runs it in one transaction and commits once (one fsync of the WAL for the batch), then
resolves each caller's future. An `append` therefore returns only after its event is on disk,
and many concurrent appends share one fsync: durable accepts stay cheap under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from orchestrator.journal import Appended, EntryState, JournalEntry, JournalError
from protocol.errors import ErrorCode
from protocol.events import AgentEvent
from protocol.private import open_private, private_dir

SCHEMA_VERSION = 1
DEDUPE_WINDOW = 24 * 3600.0
"""How long a client's idempotency key maps a retry to its first event."""
KEEP_COMPLETED = 600.0
"""How long a completed entry (and its reply) stays for `goondan send --attach`."""
BATCH_MAX = 512

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    target TEXT NOT NULL,
    dedupe_key TEXT UNIQUE,
    event BLOB NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    accepted_at REAL NOT NULL,
    completed_at REAL,
    reply BLOB
);
CREATE INDEX IF NOT EXISTS entries_open ON entries (state, seq);
"""
_COLUMNS = "seq, event, target, state, attempts, accepted_at, dedupe_key, completed_at, reply"
_encode = msgspec.msgpack.Encoder().encode
_decode_event = msgspec.msgpack.Decoder(AgentEvent).decode
T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]
_STOP = object()


def _entry(row: tuple[Any, ...]) -> JournalEntry:
    seq, event, target, state, attempts, accepted_at, dedupe_key, completed_at, reply = row
    return JournalEntry(
        seq=seq, event=_decode_event(event), target=target, state=EntryState(state),
        attempts=attempts, accepted_at=accepted_at, dedupe_key=dedupe_key,
        completed_at=completed_at, reply=_decode_event(reply) if reply is not None else None,
    )  # fmt: skip


def _connect(path: Path) -> sqlite3.Connection:
    """Open (creating it 0600 in a 0700 directory) and check the journal; JournalError when it
    is corrupt or from a newer goondan."""
    private_dir(path.parent)
    if not path.exists():
        os.close(open_private(path, os.O_RDWR))
    fix = f"move {path} aside to start with an empty journal (its pending events are lost)"
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        _check_and_prepare(conn, path, fix)
    except BaseException:
        conn.close()
        raise
    return conn


def _check_and_prepare(conn: sqlite3.Connection, path: Path, fix: str) -> None:
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise JournalError(ErrorCode.E_JOURNAL_VERSION, f"{path} is from a newer goondan "
                               f"(schema {version}, this one reads {SCHEMA_VERSION})",
                               "run the goondan that wrote it, or upgrade")  # fmt: skip
        if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise JournalError(ErrorCode.E_JOURNAL_CORRUPT, f"{path} failed its check", fix)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except sqlite3.DatabaseError as exc:
        raise JournalError(ErrorCode.E_JOURNAL_CORRUPT, f"{path} is not a readable journal "
                           f"({type(exc).__name__})", fix) from None  # fmt: skip


class SqliteJournal:
    def __init__(
        self, conn: sqlite3.Connection, path: Path, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self._conn = conn
        self._clock = clock
        self._ops: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, name="journal", daemon=True)
        self._thread.start()
        self.commits = 0
        """Transactions committed (each is one fsync): appends / commits is the batch size."""

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SqliteJournal:
        conn = await asyncio.to_thread(_connect, path)
        return cls(conn, path, clock)

    # -- the writer thread ----------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            batch = [self._ops.get()]
            while len(batch) < BATCH_MAX:
                try:
                    batch.append(self._ops.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in batch)
            self._run([item for item in batch if item is not _STOP])
            if stop:
                self._conn.close()
                return

    def _run(self, batch: list[tuple[Op, asyncio.Future[Any]]]) -> None:
        if not batch:
            return
        results: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            for op, future in batch:
                try:
                    results.append((future, op(self._conn), None))
                except sqlite3.Error as exc:
                    results.append((future, None, _write_error(self.path, exc)))
            self._conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            failed = _write_error(self.path, exc)
            results = [(future, None, failed) for _, future in batch]
        for future, value, error in results:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                future.get_loop().call_soon_threadsafe(_settle, future, value, error)

    async def _submit(self, op: Callable[[sqlite3.Connection], T]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._ops.put((op, future))
        return await future

    # -- the interface --------------------------------------------------------------------

    async def append(
        self, event: AgentEvent, target: str, dedupe_key: str | None = None
    ) -> Appended:
        now = self._clock()
        data = _encode(event)

        def op(conn: sqlite3.Connection) -> Appended:
            if dedupe_key is not None:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM entries WHERE dedupe_key = ? AND accepted_at >= ?",
                    (dedupe_key, now - DEDUPE_WINDOW),
                ).fetchone()
                if row is not None:
                    return Appended(entry=_entry(row), duplicate=True)
                # an expired key may still be stored: the new event takes it over
                conn.execute("UPDATE entries SET dedupe_key = NULL WHERE dedupe_key = ?",
                             (dedupe_key,))  # fmt: skip
            cursor = conn.execute(
                "INSERT INTO entries (event_id, target, dedupe_key, event, accepted_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (event.id, target, dedupe_key, data, now),
            )
            entry = JournalEntry(
                seq=cursor.lastrowid or 0, event=event, target=target,
                state=EntryState.ACCEPTED, attempts=0, accepted_at=now, dedupe_key=dedupe_key,
            )  # fmt: skip
            return Appended(entry=entry, duplicate=False)

        return await self._submit(op)

    async def claim(self, event_id: str) -> None:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE entries SET state = ?, attempts = attempts + 1 "
                "WHERE event_id = ? AND state < ?",
                (EntryState.CLAIMED, event_id, EntryState.COMPLETED),
            )

        await self._submit(op)

    async def complete(self, event_id: str, reply: AgentEvent | None = None) -> None:
        now = self._clock()
        data = _encode(reply) if reply is not None else None

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE entries SET state = ?, completed_at = ?, reply = coalesce(?, reply) "
                "WHERE event_id = ? AND state < ?",
                (EntryState.COMPLETED, now, data, event_id, EntryState.COMPLETED),
            )

        await self._submit(op)

    async def pending(self, target: str | None = None) -> list[JournalEntry]:
        def op(conn: sqlite3.Connection) -> list[JournalEntry]:
            query = f"SELECT {_COLUMNS} FROM entries WHERE state < ?"
            args: tuple[Any, ...] = (EntryState.COMPLETED,)
            if target is not None:
                query, args = query + " AND target = ?", (*args, target)
            return [_entry(row) for row in conn.execute(query + " ORDER BY seq", args)]

        return await self._submit(op)

    async def lookup(self, event_id: str) -> JournalEntry | None:
        def op(conn: sqlite3.Connection) -> JournalEntry | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM entries WHERE event_id = ?", (event_id,)
            ).fetchone()
            return _entry(row) if row is not None else None

        return await self._submit(op)

    async def compact(self) -> int:
        now = self._clock()

        def op(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "DELETE FROM entries WHERE state = ? AND completed_at < ? "
                "AND (dedupe_key IS NULL OR accepted_at < ?)",
                (EntryState.COMPLETED, now - KEEP_COMPLETED, now - DEDUPE_WINDOW),
            )
            return cursor.rowcount

        return await self._submit(op)

    async def stats(self) -> dict[str, Any]:
        """Entries by state, the oldest open entry's age and the file size (`doctor`)."""

        def op(conn: sqlite3.Connection) -> dict[str, Any]:
            counts = dict(conn.execute("SELECT state, count(*) FROM entries GROUP BY state"))
            oldest = conn.execute(
                "SELECT min(accepted_at) FROM entries WHERE state < ?", (EntryState.COMPLETED,)
            ).fetchone()[0]
            return {
                "open": counts.get(EntryState.ACCEPTED, 0) + counts.get(EntryState.CLAIMED, 0),
                "completed": counts.get(EntryState.COMPLETED, 0),
                "oldestOpenAgeSeconds": None if oldest is None else self._clock() - oldest,
            }

        result = await self._submit(op)
        result["bytes"] = sum(
            p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file()
        )
        return result

    async def close(self) -> None:
        self._ops.put(_STOP)
        await asyncio.to_thread(self._thread.join)


def describe(path: Path, now: float) -> dict[str, Any] | None:
    """What `goondan doctor` says of a journal, read-only (None when there is none yet);
    raises JournalError when it cannot be read."""
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise JournalError(ErrorCode.E_JOURNAL_VERSION, f"{path} is from a newer "
                                   "goondan", "run the goondan that wrote it")  # fmt: skip
            counts = dict(conn.execute("SELECT state, count(*) FROM entries GROUP BY state"))
            oldest = conn.execute(
                "SELECT min(accepted_at) FROM entries WHERE state < ?", (EntryState.COMPLETED,)
            ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        why = f"{path} is not a readable journal ({type(exc).__name__})"
        raise JournalError(ErrorCode.E_JOURNAL_CORRUPT, why, "move it aside") from None
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
    return {
        "open": sum(n for state, n in counts.items() if state < EntryState.COMPLETED),
        "finished": counts.get(EntryState.COMPLETED, 0),
        "oldestOpenAgeSeconds": None if oldest is None else round(now - oldest, 1),
        "bytes": size,
    }


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller gave up (cancelled); the write itself happened or failed anyway
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _write_error(path: Path, exc: sqlite3.Error) -> JournalError:
    return JournalError(ErrorCode.E_JOURNAL_WRITE, f"{path}: {exc}",
                        "check the disk (space, permissions) under the state root")  # fmt: skip
