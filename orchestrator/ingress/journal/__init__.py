"""The ingress journal: every event the daemon accepts is written here before it says so.

One small interface with two backends: `sqlite.SqliteJournal`, embedded under the state root
(the default, nothing to install), and NATS JetStream in cluster mode. The daemon appends an
event before acknowledging it to its sender, claims it when a process starts its turn, and
completes it when the turn's effect is in the conversation. After any crash, `pending()` is
what must still be delivered, in order per target. Event ids are idempotency keys end to end;
a client's own key (`dedupe_key`: an `Idempotency-Key` header, Telegram's `update_id`, ...)
maps a retry to the first event within the dedupe window.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol

import msgspec

from protocol.events import AgentEvent


class EntryState(IntEnum):
    ACCEPTED = 0
    """Durable, not yet started by any process."""
    CLAIMED = 1
    """A process started its turn; after a crash it is delivered again (and resumed)."""
    COMPLETED = 2
    """The turn's effect is in the conversation; kept only for attach and dedupe windows."""


class JournalEntry(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    event: AgentEvent
    target: str
    """The address the event is for (`agent:<name>:<instanceKey>`)."""
    state: EntryState
    attempts: int
    accepted_at: float
    dedupe_key: str | None = None
    completed_at: float | None = None
    reply: AgentEvent | None = None


class Appended(msgspec.Struct, frozen=True, kw_only=True):
    entry: JournalEntry
    duplicate: bool
    """True when `dedupe_key` matched an earlier event: `entry` is that event's."""


class JournalError(Exception):
    """The journal cannot be used (corrupt, from a newer version, unwritable): the daemon
    stops with this coded error rather than accept events it could lose."""

    def __init__(self, code: str, message: str, suggestion: str) -> None:
        super().__init__(f"{code}: {message} ({suggestion})")
        self.code = code
        self.message = message
        self.suggestion = suggestion


class Journal(Protocol):
    async def append(
        self, event: AgentEvent, target: str, dedupe_key: str | None = None
    ) -> Appended:
        """Durable (on disk, or replicated) when it returns."""
        ...

    async def claim(self, event_id: str) -> None: ...

    async def complete(self, event_id: str, reply: AgentEvent | None = None) -> None: ...

    async def pending(self, target: str | None = None) -> list[JournalEntry]:
        """Entries not completed, oldest first (all targets, or one)."""
        ...

    async def lookup(self, event_id: str) -> JournalEntry | None: ...

    async def compact(self) -> int:
        """Drop completed entries past their windows; return how many."""
        ...

    async def close(self) -> None: ...
