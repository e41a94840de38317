"""Reading a conversation from its files, for whoever is not the process that writes it.

`goondan instance show` and Studio read `messages/base.jsonl` + `messages/events.jsonl` and fold
them the way the agent's store does (`NextMessages = Base + Σ Events`, ARCHITECTURE.md §6),
with or without a daemon, and follow them as they grow. The agent process writes; this only
reads (`agent_process.store` decodes its own files with the same functions).

Following reads only what was appended since the last look. The store changes its files in
three ways, each recognised here: an event line appended to `events.jsonl`; a fold at turn end
(message lines appended to `base.jsonl`, or a new `base.jsonl` renamed over it, then
`events.jsonl` truncated); and the whole instance directory renamed aside (`instance delete`,
`restart --fresh`). A file replaced or truncated (another inode, a smaller size, or different
first bytes: truncated and written again between two looks) is read again from the start.
The turn's trace id is on its user message (`metadata.traceId`); for conversations written
before that, from `runtime-events.jsonl` (`turn.started` names turn and trace).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import msgspec

from protocol.conversation import Message, MessageEvent, fold

_message_decoder = msgspec.json.Decoder(Message)
_event_decoder: msgspec.json.Decoder[MessageEvent] = msgspec.json.Decoder(MessageEvent)
_HEAD_BYTES = 256
_TURN_STARTED = b'"turn.started"'
T = TypeVar("T")


class _TurnStart(msgspec.Struct, rename="camel"):
    turn_id: str | None = None
    trace_id: str | None = None


_turn_decoder = msgspec.json.Decoder(_TurnStart)


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that did not decode; `torn` when it is the last one, cut by a crash mid-write."""

    line: int
    torn: bool
    error: str


def _decode_lines(raw: bytes, decoder: msgspec.json.Decoder[T]) -> tuple[list[T], list[BadLine]]:
    out: list[T] = []
    bad: list[BadLine] = []
    lines = raw.split(b"\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(decoder.decode(line))
        except msgspec.DecodeError as exc:
            bad.append(BadLine(lineno, lineno == len(lines), str(exc)))  # no newline: torn
    return out, bad


def decode_base(raw: bytes) -> tuple[list[Message], bool, list[BadLine]]:
    """The base's messages, whether it is clean (every line read, a newline at the end: only a
    clean base may be appended to), and the lines that did not decode."""
    messages, bad = _decode_lines(raw, _message_decoder)
    return messages, not bad and (not raw or raw.endswith(b"\n")), bad


def decode_events(raw: bytes) -> tuple[list[MessageEvent], list[BadLine]]:
    return _decode_lines(raw, _event_decoder)


@dataclass(slots=True)
class _Tail:
    """The whole lines appended to one file since the last read."""

    path: Path
    inode: int | None = None
    offset: int = 0
    head: bytes = b""
    partial: bytes = b""

    def read(self) -> tuple[bool, list[bytes]] | None:
        """(started over, new complete lines), or None when nothing changed."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            if self.inode is None:
                return None
            self._reset(None)
            return True, []
        try:
            return self._read_fd(fd)
        finally:
            os.close(fd)

    def _read_fd(self, fd: int) -> tuple[bool, list[bytes]] | None:
        st = os.fstat(fd)
        again = (
            st.st_ino != self.inode
            or st.st_size < self.offset
            or (self.head and os.pread(fd, len(self.head), 0) != self.head)
        )
        if again:
            self._reset(st.st_ino)
        elif st.st_size == self.offset:
            return None
        chunks = []
        while chunk := os.pread(fd, 1 << 20, self.offset):
            if self.offset == 0:
                self.head = chunk[:_HEAD_BYTES]
            self.offset += len(chunk)
            chunks.append(chunk)
        lines = (self.partial + b"".join(chunks)).split(b"\n")
        self.partial = lines.pop()
        return bool(again), lines

    def _reset(self, inode: int | None) -> None:
        self.inode, self.offset, self.head, self.partial = inode, 0, b"", b""


@dataclass(frozen=True, slots=True)
class Change:
    """What a look at the files found since the last one."""

    added: list[Message]
    """New messages, in conversation order."""
    changed: list[Message]
    """Messages whose content or metadata changed (e.g. a turn's outcome recorded)."""
    removed: list[str]
    """Ids of messages that are gone (a remove, a truncate, the instance deleted)."""


@dataclass(slots=True)
class ConversationReader:
    """One instance's conversation, read from `messages_dir` and followed with `poll()`."""

    messages_dir: Path
    bad_lines: int = 0
    """Lines that did not decode (a torn last line is skipped until it is complete)."""
    _base: _Tail = field(init=False)
    _events: _Tail = field(init=False)
    _runtime: _Tail = field(init=False)
    _base_messages: list[Message] = field(default_factory=list)
    _event_list: list[MessageEvent] = field(default_factory=list)
    _current: dict[str, Message] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)
    """turn id -> trace id, from `turn.started` runtime events."""

    def __post_init__(self) -> None:
        self._base = _Tail(self.messages_dir / "base.jsonl")
        self._events = _Tail(self.messages_dir / "events.jsonl")
        self._runtime = _Tail(self.messages_dir / "runtime-events.jsonl")

    @property
    def messages(self) -> list[Message]:
        return list(self._current.values())

    def trace_of(self, message: Message) -> str | None:
        return self.traces.get(message.turn_id) if message.turn_id else None

    def poll(self) -> Change | None:
        """Read what changed; None when no message did. Events are read before the base: a fold
        seen half-way then shows its messages twice (applying them is idempotent), never
        zero times."""
        self._read_traces()
        events = self._events.read()
        base = self._base.read()
        if events is None and base is None:
            return None
        if events is not None:
            again, lines = events
            self._event_list = self._decode_events(lines, [] if again else self._event_list)
        if base is not None:
            again, lines = base
            self._base_messages = self._decode_base(lines, [] if again else self._base_messages)
        change = self._fold()
        return change if change.added or change.changed or change.removed else None

    def _decode_events(self, lines: list[bytes], into: list[MessageEvent]) -> list[MessageEvent]:
        events, bad = decode_events(b"\n".join(lines))
        self.bad_lines += len(bad)
        return into + events

    def _decode_base(self, lines: list[bytes], into: list[Message]) -> list[Message]:
        messages, _, bad = decode_base(b"\n".join(lines))
        self.bad_lines += len(bad)
        return into + messages

    def _read_traces(self) -> None:
        runtime = self._runtime.read()
        if runtime is None:
            return
        for line in runtime[1]:
            if _TURN_STARTED not in line:
                continue
            try:
                start = _turn_decoder.decode(line)
            except msgspec.DecodeError:
                continue
            if start.turn_id and start.trace_id:
                self.traces[start.turn_id] = start.trace_id

    def _fold(self) -> Change:
        folded = list(self._base_messages)
        fold(folded, self._event_list)
        before = self._current
        now = {m.id: m for m in folded}
        for message in folded:  # a turn's user message names its trace (turn.py)
            trace = message.metadata.get("traceId") if message.turn_id else None
            if isinstance(trace, str):
                self.traces.setdefault(message.turn_id or "", trace)
        added = [m for m in folded if m.id not in before]
        changed = [m for m in folded if m.id in before and before[m.id] != m]
        removed = [mid for mid in before if mid not in now]
        self._current = now
        return Change(added, changed, removed)
