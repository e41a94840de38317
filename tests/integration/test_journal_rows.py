"""A journal row that does not decode is quarantined, never fatal (issue 27, F10).

The journal is a file anyone running as the daemon's user can write. A row with garbage in it
used to kill the journal's writer thread: every later append waited forever, and the daemon,
stuck before it read its signals, ignored SIGTERM. Now the row is moved to the `quarantine`
table with a coded log line, events flow, and SIGTERM stops the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from pathlib import Path

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon

SWARM = "probe"
COLUMNS = "event_id, target, event, state, attempts, accepted_at"


def plant_bad_rows(path: Path) -> None:
    """Two open rows a goondan never writes: an event that is not msgpack, a state that is
    not a journal state (its event a valid one, copied from a finished row)."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        good = conn.execute("SELECT event FROM entries ORDER BY seq LIMIT 1").fetchone()[0]
        conn.execute(f"INSERT INTO entries ({COLUMNS}) VALUES (?, ?, ?, 0, 0, 1.0)",
                     ("bad-event", f"agent:alpha:{SWARM}", b"\xc1 not msgpack"))  # fmt: skip
        conn.execute(f"INSERT INTO entries ({COLUMNS}) VALUES (?, ?, ?, -1, 0, 1.0)",
                     ("bad-state", f"agent:alpha:{SWARM}", good))  # fmt: skip


def quarantined(path: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        left = conn.execute("SELECT count(*) FROM entries WHERE event_id LIKE 'bad-%'")
        assert left.fetchone()[0] == 0
        return dict(conn.execute("SELECT event_id, reason FROM quarantine"))


async def test_a_malformed_row_is_quarantined_and_sigterm_still_stops_the_daemon(
    start_daemon: StartDaemon,
) -> None:
    journal = StateLayout.from_env().journal_file(SWARM)
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        first = await daemon.send("hello", "alpha")
        assert first.ok, first.error
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
        await asyncio.to_thread(plant_bad_rows, journal)

        again = await start_daemon()
        for event_id in ("bad-event", "bad-state"):
            line = await again.wait_for("journal_row_quarantined", event_id=event_id)
            assert line["code"] == "E_JOURNAL_CORRUPT_ROW" and line["seq"] > 1
        after = await again.send("after", "alpha")  # the journal thread lives on
        assert after.ok, after.error
        again.signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await again.wait() == 0
    reasons = await asyncio.to_thread(quarantined, journal)
    assert set(reasons) == {"bad-event", "bad-state"}
    assert reasons["bad-event"].startswith("event:") and reasons["bad-state"].startswith("state:")
