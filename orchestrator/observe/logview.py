"""Read a swarm's logs and runtime events as one time-ordered stream (`goondan logs`).

Three kinds of files, all found through `StateLayout` (files only: no daemon needed):
- `logs/<swarm>/orchestrator.log`: the daemon's structlog JSON lines (`timestamp` ISO UTC);
- `logs/<swarm>/<agent>.<instanceKey>.log`: an agent process's JSON lines, plus any raw text
  it printed (tracebacks, a tool's print): such a line takes the time of the line before it,
  so it stays next to what it belongs to;
- `instances/<swarm>/<key>/<agent>/messages/runtime-events.jsonl`: turn/step/tool events
  (`at` epoch seconds, camelCase fields).
A log file and its rotated files (`<name>.1`, ..., `orchestrator.supervision.logfiles`) are one
source,
read oldest first. Each source is already in time order, so the stream is a k-way merge, never
a full sort.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal
from urllib.parse import unquote

from orchestrator.supervision import logfiles
from protocol.endpoints import StateLayout
from protocol.jsontypes import JsonObject

SourceKind = Literal["orchestrator", "process", "events"]
NO_PATH = Path("-")
"""The source path of a line read elsewhere (another cluster node's file)."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True, slots=True)
class LogSource:
    """One file and who wrote it (agent and instance known from the file name or path)."""

    path: Path
    kind: SourceKind
    swarm: str
    agent: str | None = None
    instance: str | None = None


@dataclass(frozen=True, slots=True)
class Record:
    at: float
    source: LogSource
    data: JsonObject
    """The JSON object of the line; raw text is `{"event": "_text", "text": ...}`."""
    seq: int = 0
    """Line number in its file: keeps equal timestamps in file order."""

    @property
    def agent(self) -> str | None:
        value = self.data.get("agent")
        if isinstance(value, str):
            return value
        return self.source.agent or _process_field(self.data)[0]

    @property
    def instance(self) -> str | None:
        value = self.data.get("instanceKey")
        if isinstance(value, str):
            return value
        return self.source.instance or _process_field(self.data)[1]

    @property
    def trace(self) -> str | None:
        value = self.data.get("traceId")
        return value if isinstance(value, str) else None


def _process_field(data: JsonObject) -> tuple[str | None, str | None]:
    """`agent:<name>:<key>[:<generation>]` in orchestrator lines (`process=`) -> (name, key)."""
    text = data.get("process")
    if not isinstance(text, str) or not text.startswith("agent:") or text.count(":") < 2:
        return None, None
    _, name, rest = text.split(":", 2)
    key, sep, gen = rest.rpartition(":")
    return name, key if sep and gen.isdigit() else rest


@dataclass(frozen=True, slots=True)
class Filter:
    agent: str | None = None
    instance: str | None = None
    trace: str | None = None
    since: float | None = None

    def __call__(self, record: Record) -> bool:
        if self.since is not None and record.at < self.since:
            return False
        if self.agent is not None and record.agent != self.agent:
            return False
        if self.instance is not None and record.instance != self.instance:
            return False
        # the short id `render` prints (a prefix) finds its trace too
        return self.trace is None or (record.trace or "").startswith(self.trace)


def parse_since(text: str, now: float) -> float:
    """`10m`, `1h30m`, `2d` (before `now`) or an ISO time (no zone = UTC) -> epoch seconds."""
    compact = text.strip()
    parts = _DURATION.findall(compact)
    if parts and "".join(n + u for n, u in parts) == compact:
        return now - sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    try:
        when = datetime.fromisoformat(compact.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither a duration (10m, 1h30m, 2d) "
            "nor an ISO time (2026-01-31T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _unsegment(text: str) -> str:
    """Undo `path_segment`'s `%XX` escaping."""
    return unquote(text, errors="replace")


def discover(layout: StateLayout, swarm: str | None = None) -> list[LogSource]:
    """Every log and runtime-events file of `swarm` (of every swarm when None)."""
    logs_base = layout.logs_dir("x").parent
    events_base = layout.swarm_instances_dir("x").parent
    swarms = [swarm] if swarm else _swarm_names(logs_base, events_base)
    found: list[LogSource] = []
    for name in swarms:
        found.extend(_log_files(layout.logs_dir(name), name))
        found.extend(_event_files(layout.swarm_instances_dir(name), name))
    return found


def swarm_names(layout: StateLayout) -> list[str]:
    """Every swarm that has logs or instances under the state root."""
    return _swarm_names(layout.logs_dir("x").parent, layout.swarm_instances_dir("x").parent)


def _swarm_names(*bases: Path) -> list[str]:
    names = {_unsegment(d.name) for base in bases if base.is_dir() for d in base.iterdir()}
    return sorted(names)


def _log_files(directory: Path, swarm: str) -> Iterator[LogSource]:
    """One source per log, its rotated files included (a log whose current file is gone,
    e.g. an agent's that wrote nothing since its last rotation, too)."""
    if not directory.is_dir():
        return
    names = set()
    for entry in os.listdir(directory):
        head = entry.rpartition(".")[0]
        if entry.endswith(".log"):
            names.add(entry)
        elif head.endswith(".log") and logfiles.rotated_index(entry, head) is not None:
            names.add(head)
    for path in sorted(directory / name for name in names):
        if path.name == "orchestrator.log":
            yield LogSource(path, "orchestrator", swarm)
            continue
        # agent names never contain '.' (protocol.ids), so the first '.' ends the name
        agent, _, key = path.name.removesuffix(".log").partition(".")
        yield LogSource(path, "process", swarm, _unsegment(agent), _unsegment(key))


def _event_files(directory: Path, swarm: str) -> Iterator[LogSource]:
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("*/*/messages/runtime-events.jsonl")):
        agent_dir = path.parent.parent
        yield LogSource(
            path, "events", swarm, _unsegment(agent_dir.name), _unsegment(agent_dir.parent.name)
        )


def parse_line(line: str, source: LogSource, last_at: float, seq: int = 0) -> Record | None:
    """One line -> Record (None for a blank line). Raw text takes `last_at` as its time."""
    text = line.rstrip("\n")
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Record(last_at, source, {"event": "_text", "text": text}, seq)
    return Record(_time_of(data, last_at), source, data, seq)


def _time_of(data: JsonObject, fallback: float) -> float:
    at = data.get("at")
    if isinstance(at, int | float):
        return float(at)
    stamp = data.get("timestamp")
    if isinstance(stamp, str):
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return fallback
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return fallback


HEAD_BYTES = 64
"""How much of a file's start identifies it beside its inode (a log line starts with its time)."""


@dataclass(slots=True)
class Reader:
    """Reads one log from where it left off: whole lines only (a partly written line waits).

    A log that rotates (`orchestrator.supervision.logfiles`) is one stream: the first read takes its
    rotated files, oldest first, then the file itself; a later read that finds the file
    replaced (rotated since) takes the rest of the file it was in and every file rotated after
    it, found by inode, before the new file. A file truncated in place (an outside
    `logrotate copytruncate`) is read again from its start."""

    source: LogSource
    offset: int = 0
    last_at: float = 0.0
    seq: int = 0
    inode: int | None = None
    """The file `offset` is in."""
    head: bytes = b""
    """Its first bytes (up to HEAD_BYTES): with the inode, what tells it from a later file.
    A deleted file's inode is reused by the next file created (a rotated-out file's by the
    new log), so the inode alone would take a new file for the one read last."""
    _partial: bytes = field(default=b"", repr=False)

    def read_new(self) -> list[Record]:
        try:
            fh = self.source.path.open("rb")
        except OSError:
            fh = None
        try:
            ino, same = self._identity(fh) if fh is not None else (None, False)
            records = [] if same else self._rotated_since()
            if fh is not None and ino is not None:
                if not same:
                    records += self._switch(ino)
                records += self._read(fh)
            return records
        finally:
            if fh is not None:
                fh.close()

    def _rotated_since(self) -> list[Record]:
        """The unread part of the rotated files: all of them on the first read, else from the
        file read last on (none when that file is gone: it was dropped, or rotated out)."""
        first = self.inode is None
        found = first
        records: list[Record] = []
        for path in logfiles.rotated_files(self.source.path):
            try:
                fh = path.open("rb")
            except OSError:
                continue
            with fh:
                ino, same = self._identity(fh)
                if not found:
                    found = same
                    if not found:
                        continue  # older than the file read last
                else:
                    records += self._switch(ino)
                records += self._read(fh)
        return records

    def _identity(self, fh: BinaryIO) -> tuple[int, bool]:
        """The file's inode, and whether it is the file read last: the same inode and the same
        first bytes (a new file under a reused inode starts otherwise)."""
        ino = os.fstat(fh.fileno()).st_ino
        same = ino == self.inode and os.pread(fh.fileno(), len(self.head), 0) == self.head
        return ino, same

    def _switch(self, ino: int) -> list[Record]:
        """Go on in another file: a line left unended in the last one is a line."""
        rest, self._partial = self._partial, b""
        self.inode, self.offset, self.head = ino, 0, b""
        return self._records([rest]) if rest else []

    def _read(self, fh: BinaryIO) -> list[Record]:
        size = fh.seek(0, 2)
        if size < self.offset:  # truncated in place: start over
            self.offset, self._partial = 0, b""
        fh.seek(self.offset)
        chunk = fh.read()
        if len(self.head) < HEAD_BYTES:
            self.head = os.pread(fh.fileno(), HEAD_BYTES, 0)
        self.offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        return self._records(lines)

    def _records(self, lines: Iterable[bytes]) -> list[Record]:
        out = []
        for raw in lines:
            self.seq += 1
            record = parse_line(raw.decode(errors="replace"), self.source, self.last_at, self.seq)
            if record is not None:
                self.last_at = record.at
                out.append(record)
        return out


class LogTail:
    """Every log and runtime-events file of a swarm (or of all) and how far each was read:
    `read_new` gives what was written since, merged by time, files that appeared included."""

    def __init__(self, layout: StateLayout, swarm: str | None) -> None:
        self.layout = layout
        self.swarm = swarm
        self.readers: dict[str, Reader] = {}

    def refresh(self) -> int:
        """Pick up files that appeared since the last look; return how many are known."""
        for source in discover(self.layout, self.swarm):
            self.readers.setdefault(str(source.path), Reader(source))
        return len(self.readers)

    def read_new(self) -> list[Record]:
        self.refresh()
        return list(merged(reader.read_new() for reader in self.readers.values()))


def merged(batches: Iterable[list[Record]]) -> Iterator[Record]:
    """k-way merge of per-file record lists (each in file order) by time."""
    return heapq.merge(*batches, key=lambda r: r.at)


def clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_SKIP = frozenset(
    {"timestamp", "at", "event", "level", "type", "agent", "instanceKey", "pid", "process",
     "traceId", "spanId", "parentSpanId"}
)  # fmt: skip


def render(record: Record, *, swarm: bool = False) -> str:
    """One readable line: time, who (with `swarm`, which swarm first), level or event type,
    what, then the other fields."""
    data = record.data
    who = "orchestrator" if record.source.kind == "orchestrator" else (
        f"{record.agent}/{_short(record.instance or '')}"
    )  # fmt: skip
    if swarm:
        who = f"{_short(record.source.swarm)}:{who}"
    if data.get("event") == "_text":
        return f"{clock(record.at)} {who} | {data['text']}"
    if record.source.kind == "events":
        head = f"event {data.get('type', '?')}"
    else:
        head = f"{data.get('level', 'info')} {data.get('event', '')}"
    skip = _SKIP - {"process"} if record.source.kind == "orchestrator" else _SKIP
    extra = " ".join(f"{k}={_short(v)}" for k, v in data.items() if k not in skip)
    trace = f" trace={record.trace[:8]}" if record.trace else ""
    return f"{clock(record.at)} {who} {head}{trace}" + (f" {extra}" if extra else "")


def _short(value: Any) -> str:
    """A field value as one token: floats rounded (durations), text with spaces quoted."""
    if isinstance(value, float):
        return _rounded(value)
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if " " not in text else json.dumps(text, ensure_ascii=False)


def _rounded(value: float) -> str:
    size = abs(value)
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if size >= 1 else f"{value:.3g}"


def as_json(record: Record) -> str:
    """The line as written (raw text wrapped), plus where it came from."""
    data = dict(record.data)
    if data.get("event") == "_text":
        data.update(timestamp=clock(record.at), agent=record.agent, instanceKey=record.instance)
    data["source"] = record.source.kind
    return json.dumps(data, separators=(",", ":"))
