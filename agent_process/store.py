"""The event-sourced conversation of one instance: `messages/base.jsonl` + `messages/events.jsonl`.

Durability (why each write is what it is):
- Every MessageEvent is written to `events.jsonl` with one `os.write` on an `O_APPEND` fd *when
  it happens*, without fsync. After `write()` returns the bytes are in the kernel's page cache,
  so a SIGKILL (or any crash of this process) loses nothing written; only a power loss or
  kernel crash could, and that is what the fsync at the durability point covers.
- The durability point is `fold()` at turn end (and on close). Two ways, same result on disk:
  - *append* (the usual turn: only new messages were appended since the last fold, edits
    touched only those, and the base on disk is known clean): the new message lines are
    appended to `base.jsonl` with one `write` and `fdatasync`ed; no temp file, no rename, no
    directory fsync, and the cost does not grow with the history.
  - *rewrite* (anything else: a replace, remove or truncate, the first fold, a recovery): the
    folded messages go to a temp file, which is fsynced, renamed over `base.jsonl`, and the
    directory fsynced.
  Only then is `events.jsonl` truncated (and fsynced). A crash between the base write and the
  truncation replays events that are already in the base; applying them is idempotent (see
  `protocol.conversation`), so the result is the same. A crash in the middle of an append
  can leave a torn last line in the base, but the events of that fold are still in
  `events.jsonl` (truncated only after the fdatasync): the torn line is skipped, the events
  replayed, and the first fold of the next process is a rewrite, which repairs the file.
- On open, leftover events are replayed onto the base. A torn last line (a crash in the middle
  of a write) is skipped with a warning; every complete line before it is kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from protocol.conversation import (
    AppendEvent,
    Message,
    MessageEvent,
    RemoveEvent,
    ReplaceEvent,
    Role,
    TruncateEvent,
    apply_event,
    fold,
    new_message,
)
from protocol.durable import write_atomic
from protocol.private import open_private, private_dir
from protocol.transcript import decode_base, decode_events

_log = structlog.get_logger("goondan.store")
_encoder = msgspec.json.Encoder()


class ConversationStore:
    """Base + events, with every edit appended to `events.jsonl` as it happens."""

    def __init__(self, messages_dir: Path, *, sink: int | None = None) -> None:
        self._dir = messages_dir
        self._sink = sink
        """An open fd that takes every event instead of `events.jsonl`, the caller's to close:
        the conversation then lives in memory only (nothing is read from or folded into the
        directory). The fork server's rehearsal passes /dev/null."""
        self._base_path = messages_dir / "base.jsonl"
        self._events_path = messages_dir / "events.jsonl"
        self._messages: list[Message] = []
        self._fd: int | None = None
        self._pending_events = 0
        self._appended: list[Message] | None = None
        """Messages appended since the last fold while that is all that happened and the base
        on disk is clean (the next fold may append them); None: the next fold rewrites."""
        self.recovered_events = 0
        """Events replayed from a previous process's unfolded log (0 after a clean stop)."""
        self.mirror: Callable[[bytes], None] | None = None
        """Cluster mode: told every event line right after it is written (the child sends it
        to its node, which appends it to the history stream)."""

    # -- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        if self._sink is not None:
            self._fd, self._appended = self._sink, []
            return
        private_dir(self._dir)
        self._messages, clean = self._read_base()
        events = self._read_events()
        fold(self._messages, events)
        replayed = len(events)
        self.recovered_events = replayed
        self._pending_events = replayed
        self._appended = [] if clean and not replayed and self._base_path.exists() else None
        self._fd = open_private(self._events_path, os.O_WRONLY | os.O_APPEND)
        if replayed:
            _log.info("conversation_replayed", events=replayed, path=str(self._events_path))

    def close(self) -> None:
        """Fold, then close; an empty `events.jsonl` is removed (a hibernated instance keeps
        no empty file; the next `open` creates it again)."""
        if self._fd is None:
            return
        self.fold()
        if self._fd != self._sink:
            empty = os.fstat(self._fd).st_size == 0
            os.close(self._fd)
            if empty:
                self._events_path.unlink(missing_ok=True)
        self._fd = None

    # -- reading ------------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """The current list (a copy: edits go through append/replace/remove/truncate)."""
        return list(self._messages)

    def get(self, message_id: str) -> Message | None:
        return next((m for m in self._messages if m.id == message_id), None)

    # -- the four MessageEvents ---------------------------------------------------------

    def append_message(self, message: Message) -> Message:
        self._record(AppendEvent(message=message, at=time.time()))
        return message

    def append(self, role: str, content: str, **fields: Any) -> Message:
        return self.append_message(new_message(Role(role), content, **fields))

    def replace(self, message_id: str, content: str, **fields: Any) -> Message:
        current = self.get(message_id)
        if current is None:
            raise KeyError(f"no message with id {message_id!r} in this conversation")
        updated = msgspec.structs.replace(current, content=content, **fields)
        self._record(ReplaceEvent(message_id=message_id, message=updated, at=time.time()))
        return updated

    def remove(self, message_id: str) -> None:
        self._record(RemoveEvent(message_id=message_id, at=time.time()))

    def truncate(self) -> None:
        self._record(TruncateEvent(at=time.time()))

    def _record(self, event: MessageEvent) -> None:
        if self._fd is None:
            raise RuntimeError("the conversation store is not open")
        line = _encoder.encode(event) + b"\n"
        os.write(self._fd, line)  # one write per event: in the page cache before we go on
        if self.mirror is not None:
            self.mirror(line)
        count = len(self._messages)
        apply_event(self._messages, event)
        self._pending_events += 1
        if self._appended is not None:
            if isinstance(event, AppendEvent) and len(self._messages) == count + 1:
                self._appended.append(event.message)
            elif not self._edits_unfolded(event):
                self._appended = None  # an edit of what the base holds: only a rewrite folds it

    def _edits_unfolded(self, event: MessageEvent) -> bool:
        """Apply a replace or remove of a message appended since the last fold to the
        pending appends, and say so: the base does not hold that message yet, so the fold can
        still append. Every turn ends with such an edit (its user message is marked ended), and
        without this each turn's fold would rewrite the whole history."""
        assert self._appended is not None
        if not isinstance(event, ReplaceEvent | RemoveEvent):
            return False
        if not any(m.id == event.message_id for m in self._appended):
            return False
        apply_event(self._appended, event)
        return True

    # -- folding (the durability point) -------------------------------------------------

    def fold(self) -> None:
        """Make base = current messages durable (append or atomic rewrite), clear the events."""
        if self._pending_events == 0:
            return
        if self._sink is not None:  # in memory only: nothing to make durable
            self._pending_events = 0
            return
        try:
            self._write_base()
        except OSError:
            self._appended = None  # unknown what reached the base: the next fold rewrites it
            raise
        self._appended = []
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
        self._pending_events = 0

    def _write_base(self) -> None:
        if self._appended is not None:
            data = b"".join(_encoder.encode(m) + b"\n" for m in self._appended)
            try:
                _append_synced(self._base_path, data)
                return
            except OSError as exc:  # e.g. the base was removed under us: rewrite it whole
                _log.warning("base_append_failed", path=str(self._base_path), error=str(exc))
                self._appended = None
        data = b"".join(_encoder.encode(m) + b"\n" for m in self._messages)
        write_atomic(self._base_path, data)

    def _read_base(self) -> tuple[list[Message], bool]:
        """The base's messages, and whether the file is clean (every line read, a newline at
        the end): only a clean base may be appended to."""
        if not self._base_path.exists():
            return [], True
        messages, clean, bad = decode_base(self._base_path.read_bytes())
        for line in bad:
            _log.error("base_line_unreadable", line=line.line, error=line.error)
        return messages, clean

    def _read_events(self) -> list[MessageEvent]:
        if not self._events_path.exists():
            return []
        events, bad = decode_events(self._events_path.read_bytes())
        for line in bad:
            _log.warning("event_line_skipped", line=line.line, torn=line.torn, error=line.error)
        return events


def _append_synced(path: Path, data: bytes) -> None:
    """One write at the end of an existing file, then fdatasync (data and size on disk)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)
