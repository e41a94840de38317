"""The event-sourced conversation of one instance: `messages/base.jsonl` + `messages/events.jsonl`.

Durability (why each write is what it is):
- Every MessageEvent is written to `events.jsonl` with one `os.write` on an `O_APPEND` fd *when
  it happens*, without fsync. After `write()` returns the bytes are in the kernel's page cache,
  so a SIGKILL (or any crash of this process) loses nothing written; only a power loss or
  kernel crash could, and that is what the fsync at the durability point covers.
- The durability point is `fold()` at turn end (and on close): the folded messages go to a temp
  file, which is fsynced, renamed over `base.jsonl`, and the directory fsynced; only then is
  `events.jsonl` truncated (and fsynced). A crash between the rename and the truncation
  replays events that are already in the base; applying them is idempotent (see
  `agent_process.messages`), so the result is the same.
- On open, leftover events are replayed onto the base. A torn last line (a crash in the middle
  of a write) is skipped with a warning; every complete line before it is kept.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agent_process.messages import (
    AppendEvent,
    Message,
    MessageEvent,
    RemoveEvent,
    ReplaceEvent,
    Role,
    TruncateEvent,
    apply_event,
    new_message,
)

_log = structlog.get_logger("goondan.store")
_encoder = msgspec.json.Encoder()
_event_decoder: msgspec.json.Decoder[MessageEvent] = msgspec.json.Decoder(MessageEvent)
_message_decoder = msgspec.json.Decoder(Message)


class ConversationStore:
    """Base + events, with every edit appended to `events.jsonl` as it happens."""

    def __init__(self, messages_dir: Path) -> None:
        self._dir = messages_dir
        self._base_path = messages_dir / "base.jsonl"
        self._events_path = messages_dir / "events.jsonl"
        self._messages: list[Message] = []
        self._fd: int | None = None
        self._pending_events = 0
        self.recovered_events = 0
        """Events replayed from a previous process's unfolded log (0 after a clean stop)."""

    # -- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._messages = self._read_base()
        replayed = 0
        for event in self._read_events():
            apply_event(self._messages, event)
            replayed += 1
        self.recovered_events = replayed
        self._pending_events = replayed
        self._fd = os.open(self._events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if replayed:
            _log.info("conversation_replayed", events=replayed, path=str(self._events_path))

    def close(self) -> None:
        if self._fd is None:
            return
        self.fold()
        os.close(self._fd)
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
        apply_event(self._messages, event)
        self._pending_events += 1

    # -- folding (the durability point) -------------------------------------------------

    def fold(self) -> None:
        """Write base = current messages atomically, then clear the events."""
        if self._pending_events == 0:
            return
        data = b"".join(_encoder.encode(m) + b"\n" for m in self._messages)
        write_json_atomic(self._base_path, data)
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
        self._pending_events = 0

    def _read_base(self) -> list[Message]:
        if not self._base_path.exists():
            return []
        out = []
        for lineno, line in enumerate(self._base_path.read_bytes().splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(_message_decoder.decode(line))
            except msgspec.DecodeError as exc:
                _log.error("base_line_unreadable", line=lineno, error=str(exc))
        return out

    def _read_events(self) -> list[MessageEvent]:
        if not self._events_path.exists():
            return []
        events = []
        lines = self._events_path.read_bytes().split(b"\n")
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                events.append(_event_decoder.decode(line))
            except msgspec.DecodeError as exc:
                torn = lineno == len(lines)  # no newline after it: cut by a crash mid-write
                _log.warning("event_line_skipped", line=lineno, torn=torn, error=str(exc))
        return events


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: bytes) -> None:
    """temp file + fsync + rename + directory fsync (extension state, base files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
