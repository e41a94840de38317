"""Reading a journal row back, and moving aside one that does not decode.

The journal is this daemon's, but its file is on a disk anyone running as the daemon's user can
write. A row that does not decode (an event that is not msgpack of an `AgentEvent`, a state that
is no `EntryState`, a column of the wrong type) must not stop the writer thread that read it:
every later append would wait forever. It is moved to the `quarantine` table with why (kept for
the operator, never deleted), logged `journal_row_quarantined` with `E_JOURNAL_CORRUPT_ROW`, and
the read goes on without it. Runs in the writer thread, inside its transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import msgspec
import structlog

from orchestrator.ingress.journal import EntryState, JournalEntry
from protocol.errors import ErrorCode
from protocol.events import AgentEvent

QUARANTINE_SCHEMA = """
CREATE TABLE IF NOT EXISTS quarantine (
    seq INTEGER PRIMARY KEY,
    event_id, target, dedupe_key, event, state, attempts, accepted_at, completed_at, reply,
    reason TEXT NOT NULL,
    quarantined_at REAL NOT NULL
);
"""
COLUMNS = "seq, event, target, state, attempts, accepted_at, dedupe_key, completed_at, reply"
_MOVED = "event_id, target, dedupe_key, event, state, attempts, accepted_at, completed_at, reply"
_decode_event = msgspec.msgpack.Decoder(AgentEvent).decode
_STATES = frozenset(state.value for state in EntryState)
log = structlog.get_logger("goondan.journal")


class BadRow(Exception):
    """Why a row does not decode: `<column>: <what is wrong>`."""


def _event(column: str, data: Any) -> AgentEvent:
    if not isinstance(data, bytes):
        raise BadRow(f"{column}: stored as {type(data).__name__}, not msgpack bytes")
    try:
        return _decode_event(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadRow(f"{column}: {exc}") from None


def _check(column: str, value: Any, *types: type) -> None:
    if not isinstance(value, types) or isinstance(value, bool):
        raise BadRow(f"{column}: stored as {type(value).__name__}")


def decode(row: tuple[Any, ...]) -> JournalEntry:
    """The entry of a row of `COLUMNS`; raises BadRow."""
    seq, event, target, state, attempts, accepted_at, dedupe_key, completed_at, reply = row
    _check("target", target, str)
    _check("attempts", attempts, int)
    _check("accepted_at", accepted_at, int, float)
    _check("dedupe_key", dedupe_key, str, type(None))
    _check("completed_at", completed_at, int, float, type(None))
    if not isinstance(state, int) or state not in _STATES:
        raise BadRow(f"state: {state!r} is not a journal state")
    return JournalEntry(
        seq=seq, event=_event("event", event), target=target, state=EntryState(state),
        attempts=attempts, accepted_at=accepted_at, dedupe_key=dedupe_key,
        completed_at=completed_at, reply=None if reply is None else _event("reply", reply),
    )  # fmt: skip


def decode_all(
    conn: sqlite3.Connection, rows: Iterable[tuple[Any, ...]], now: float
) -> list[JournalEntry]:
    """The entries of `rows` (already fetched: quarantining changes the table), in order,
    without the ones that do not decode (quarantined)."""
    entries = []
    for row in rows:
        entry = decode_or_quarantine(conn, row, now)
        if entry is not None:
            entries.append(entry)
    return entries


def decode_or_quarantine(
    conn: sqlite3.Connection, row: tuple[Any, ...], now: float
) -> JournalEntry | None:
    try:
        return decode(row)
    except BadRow as bad:
        quarantine(conn, row[0], str(bad), now)
        return None


def quarantine(conn: sqlite3.Connection, seq: int, reason: str, now: float) -> None:
    moved = conn.execute(
        f"INSERT OR REPLACE INTO quarantine (seq, {_MOVED}, reason, quarantined_at) "
        f"SELECT seq, {_MOVED}, ?, ? FROM entries WHERE seq = ?",
        (reason, now, seq),
    ).rowcount
    event_id = conn.execute("SELECT event_id FROM entries WHERE seq = ?", (seq,)).fetchone()
    conn.execute("DELETE FROM entries WHERE seq = ?", (seq,))
    log.error("journal_row_quarantined", code=ErrorCode.E_JOURNAL_CORRUPT_ROW, seq=seq,
              event_id=None if event_id is None else str(event_id[0]), reason=reason,
              moved=bool(moved), table="quarantine")  # fmt: skip
