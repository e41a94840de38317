"""The embedded journal: one SQLite file per swarm (WAL, `synchronous=FULL`), written by one
thread with group commit (`writer.py`).

Every operation the event loop asks for goes on the writer's queue, runs in the batch's one
transaction, and its caller's future is resolved after the commit. An `append` therefore returns
only after its event is on disk, and many concurrent appends share one fsync: durable accepts
stay cheap under load. A row read back that does not decode is quarantined (`rows.py`); a
failed writer thread is surfaced by `watch()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import structlog

from orchestrator.ingress.journal import Appended, EntryState, JournalEntry, JournalError
from orchestrator.ingress.journal.rows import COLUMNS as _COLUMNS
from orchestrator.ingress.journal.rows import QUARANTINE_SCHEMA, decode_all, decode_or_quarantine
from orchestrator.ingress.journal.writer import Writer
from protocol.errors import ErrorCode
from protocol.events import AgentEvent
from protocol.private import open_private, private_dir

SCHEMA_VERSION = 1
DEDUPE_WINDOW = 24 * 3600.0
"""How long a client's idempotency key maps a retry to its first event."""
KEEP_COMPLETED = 600.0
"""How long a completed entry (and its reply) stays for `goondan send --attach`."""

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
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    ledger BLOB NOT NULL
);
"""
_SCHEMA += QUARANTINE_SCHEMA  # one script: the tables a journal has
_encode = msgspec.msgpack.Encoder().encode
T = TypeVar("T")
log = structlog.get_logger("goondan.journal")


def _connect(path: Path) -> sqlite3.Connection:
    return _open(path)[0]


def _open(path: Path) -> tuple[sqlite3.Connection, bytes | None, bool]:
    """Open (creating it 0600 in a 0700 directory) and check the journal; JournalError when it
    is corrupt or from a newer goondan. With what `_usage_at_open` reads."""
    private_dir(path.parent)
    if not path.exists():
        os.close(open_private(path, os.O_RDWR))
    fix = f"move {path} aside to start with an empty journal (its pending events are lost)"
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        copy, history = _check_and_prepare(conn, path, fix)
    except BaseException:
        conn.close()
        raise
    return conn, copy, history


def _usage_at_open(conn: sqlite3.Connection) -> tuple[bytes | None, bool]:
    """(the budgets' usage copy, whether any event was ever journaled) as the file was opened."""
    row = conn.execute("SELECT ledger FROM usage WHERE id = 1").fetchone()
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'entries'").fetchone()
    copy = row[0] if row is not None and isinstance(row[0], bytes) else None
    return copy, seq is not None and isinstance(seq[0], int) and seq[0] > 0


def _check_and_prepare(conn: sqlite3.Connection, path: Path, fix: str) -> tuple[bytes | None, bool]:
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
        return _usage_at_open(conn)
    except sqlite3.DatabaseError as exc:
        raise JournalError(ErrorCode.E_JOURNAL_CORRUPT, f"{path} is not a readable journal "
                           f"({type(exc).__name__})", fix) from None  # fmt: skip


def _close_unclaimed(
    opening: asyncio.Future[tuple[sqlite3.Connection, bytes | None, bool]],
) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result()[0].close()


class SqliteJournal:
    def __init__(
        self, conn: sqlite3.Connection, path: Path, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self._clock = clock
        self._writer = Writer(conn, path)
        self.usage_copy: bytes | None = None
        """The budgets' usage ledger as the last daemon kept it here (`keep_usage`)."""
        self.has_history = False
        """Whether any event was ever journaled in this file (before this daemon)."""

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SqliteJournal:
        opening = asyncio.ensure_future(asyncio.to_thread(_open, path))
        try:
            conn, copy, history = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # the thread cannot be stopped: the connection it still opens is closed when it does
            opening.add_done_callback(_close_unclaimed)
            raise
        journal = cls(conn, path, clock)
        journal.usage_copy, journal.has_history = copy, history
        return journal

    def keep_usage(self, ledger: bytes) -> None:
        """A copy of the budgets' usage file, in the next batch (not awaited): deleting the
        file does not reset a budget (orchestrator/calls/budgets.py)."""

        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO usage (id, ledger) VALUES (1, ?)", (ledger,))

        self._writer.post(op).add_done_callback(_log_unkept)

    @property
    def commits(self) -> int:
        """Transactions committed (each is one fsync): appends / commits is the batch size."""
        return self._writer.commits

    async def _submit(self, op: Callable[[sqlite3.Connection], T]) -> T:
        return await self._writer.submit(op)

    async def watch(self) -> None:
        """Returns once the journal is closed; raises JournalError (`E_JOURNAL_FAILED`) when
        its writer thread failed: the daemon runs it as a core task and stops then."""
        await self._writer.ended()

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
                first = None if row is None else decode_or_quarantine(conn, row, now)
                if first is not None:
                    return Appended(entry=first, duplicate=True)
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
            rows = conn.execute(query + " ORDER BY seq", args).fetchall()
            return decode_all(conn, rows, self._clock())

        return await self._submit(op)

    async def lookup(self, event_id: str) -> JournalEntry | None:
        def op(conn: sqlite3.Connection) -> JournalEntry | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM entries WHERE event_id = ?", (event_id,)
            ).fetchone()
            return None if row is None else decode_or_quarantine(conn, row, self._clock())

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
        """Once what is queued is written (no bound here: the daemon bounds its wait)."""
        self._writer.stop()
        with contextlib.suppress(JournalError):  # it failed: logged and watched already
            await self._writer.ended()


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
            quarantined = _quarantined(conn)
    except sqlite3.DatabaseError as exc:
        why = f"{path} is not a readable journal ({type(exc).__name__})"
        raise JournalError(ErrorCode.E_JOURNAL_CORRUPT, why, "move it aside") from None
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
    return {
        "open": sum(n for state, n in counts.items() if state < EntryState.COMPLETED),
        "finished": counts.get(EntryState.COMPLETED, 0),
        "oldestOpenAgeSeconds": None if oldest is None else round(now - oldest, 1),
        "bytes": size,
        "quarantined": quarantined,
    }


def _quarantined(conn: sqlite3.Connection) -> int:
    """Rows moved aside because they did not decode (0 in a journal from before the table)."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    if "quarantine" not in tables:
        return 0
    return int(conn.execute("SELECT count(*) FROM quarantine").fetchone()[0])


def _log_unkept(kept: asyncio.Future[None]) -> None:
    if not kept.cancelled() and kept.exception() is not None:
        log.error("usage_copy_not_saved", error=str(kept.exception()))
