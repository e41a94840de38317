"""The conversation history stream: every conversation event of an instance, in order, fenced
(ARCHITECTURE.md §15).

The child writes each event to its `events.jsonl` as on one machine and sends the same line
as a `history` frame; this node publishes the lines to `goondan.<swarm>.h.<agent>.<key>` with
`Nats-Expected-Last-Subject-Sequence` = the last sequence it knows for that subject. A node
that lost the instance (its lease lapsed while it was paused, and another node appended since)
is refused: the instance is fenced here, its process evicted, and nothing queued behind the
refused append runs (no acknowledgement, no reply). Lines that arrive while a publish is in
flight go out together in the next one.

Steps that must follow the appends made so far (acknowledging the event, publishing the reply,
forwarding a response) are queued behind them with `after`.

The local files are a cache: before an instance's process starts (`prepare`), the node reads
the subject's last sequence; when the cache does not end there (`messages/.history-seq`), or
holds events never folded, `base.jsonl` is rebuilt from the stream and `events.jsonl` cleared.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import nats.errors
import nats.js.errors
import structlog

from orchestrator.cluster.history_view import read_subject
from orchestrator.cluster.link import WRONG_LAST, Nats
from orchestrator.supervision.spawner import SpawnError
from orchestrator.supervision.table import ProcessEntry
from protocol.conversation import Message, fold
from protocol.durable import write_atomic
from protocol.endpoints import InstancePaths, StateLayout
from protocol.ids import Address
from protocol.transcript import decode_events

log = structlog.get_logger("goondan.cluster.history")
SEQ_FILE = ".history-seq"
EXPECTED = "Nats-Expected-Last-Subject-Sequence"
MSG_ID = "Nats-Msg-Id"
PUBLISH_DEADLINE = 30.0
_encode = msgspec.json.Encoder().encode

Step = Callable[[], Awaitable[None] | None]


@dataclass(slots=True)
class InstanceLog:
    last_seq: int | None
    """The subject's last sequence as this node knows it (None: not read yet)."""
    generation: int = -1
    """The process generation whose frames are taken (-1: none, steps only)."""
    items: deque[bytes | Step] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    fenced: bool = False
    published: int = 0
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    """In each append's `Nats-Msg-Id` with the sequence it follows: a retried publish of this
    log is stored once, and the first append of a conversation that was purged (`instance
    delete`) is not taken for a duplicate of the old first one, still in the dedupe window."""


class HistoryWriter:
    def __init__(
        self,
        nats_: Nats,
        layout: StateLayout,
        swarm: str,
        allowed: Callable[[Address], bool],
        fenced: Callable[[Address], None],
    ) -> None:
        self.nats = nats_
        self.layout = layout
        self.swarm = swarm
        self.allowed = allowed
        """Whether this node may write for the instance now (its partition's lease)."""
        self.fenced = fenced
        """Called once when an instance is fenced: evict its process, forget its work."""
        self.logs: dict[Address, InstanceLog] = {}
        self.rebuilt = 0
        """Activations that rebuilt their cache from the stream (moved or stale instances)."""

    def paths(self, address: Address) -> InstancePaths:
        return self.layout.instance_paths(self.swarm, address.instance_key, address.name)

    # -- activation --------------------------------------------------------------------------

    async def prepare(self, address: Address, generation: int) -> None:
        """Before the instance's process starts: its files end where the stream ends.
        Raises SpawnError when the stream cannot be read (the spawn fails like a fork would)."""
        earlier = self.logs.get(address)
        if earlier is not None and earlier.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await earlier.task  # the last process's appends first
        try:
            last = await self._last_seq(address)
            paths = self.paths(address)
            if not _cache_fresh(paths, last):
                await self._rebuild(address, paths, last)
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            raise SpawnError(f"history of {address} unreadable: {type(exc).__name__}") from exc
        self.logs[address] = InstanceLog(last_seq=last, generation=generation)

    async def _last_seq(self, address: Address) -> int:
        subject = self.nats.names.history_subject(address)
        try:
            msg = await self.nats.js.get_last_msg(self.nats.names.history_stream, subject,
                                                  direct=True)  # fmt: skip
        except nats.js.errors.NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def _rebuild(self, address: Address, paths: InstancePaths, last: int) -> None:
        started = time.monotonic()
        data = await self.read(address, last)
        events, bad = decode_events(data)
        for line in bad:
            log.error("history_line_unreadable", instance=str(address), line=line.line)
        messages: list[Message] = []
        fold(messages, events)
        base = b"".join(_encode(m) + b"\n" for m in messages)
        await asyncio.to_thread(_write_cache, paths, base, last)
        self.rebuilt += 1
        log.info("history_rebuilt", instance=str(address), events=len(events), seq=last,
                 ms=round((time.monotonic() - started) * 1000, 1))  # fmt: skip

    async def read(self, address: Address, last: int) -> bytes:
        """Every line of the instance's history up to stream sequence `last`."""
        if last == 0:
            return b""
        names = self.nats.names
        chunks, _ = await read_subject(self.nats.js, names.history_stream,
                                       names.history_subject(address), 0, last)  # fmt: skip
        return b"".join(chunks)

    # -- appends and the steps behind them -----------------------------------------------------

    def append(self, entry: ProcessEntry, line: bytes) -> None:
        """The router's `history` frame handler. Only the process this node prepared may
        append: a frame of an earlier generation, or of an instance dropped here, is not
        written (its turn is redelivered and runs again from the stream's history)."""
        log_ = self.logs.get(entry.address)
        if log_ is None or log_.generation != entry.generation:
            log.warning("history_frame_dropped", process=entry.id_text)
            return
        self._push(entry.address, line)

    def after(self, address: Address, step: Step) -> None:
        self._push(address, step)

    def _push(self, address: Address, item: bytes | Step) -> None:
        entry = self.logs.get(address)
        if entry is None:
            entry = self.logs[address] = InstanceLog(last_seq=None)
        if entry.fenced:
            return
        entry.items.append(item)
        if entry.task is None or entry.task.done():
            entry.task = asyncio.ensure_future(self._drain(address, entry))

    async def _drain(self, address: Address, entry: InstanceLog) -> None:
        while entry.items and not entry.fenced:
            if isinstance(entry.items[0], bytes):
                lines = []
                while entry.items and isinstance(entry.items[0], bytes):
                    lines.append(entry.items.popleft())
                if not await self._publish(address, entry, b"".join(lines)):  # type: ignore[arg-type]
                    entry.fenced = True
                    entry.items.clear()
                    _invalidate(self.paths(address))
                    self.fenced(address)
                    return
                continue
            step = entry.items.popleft()
            assert not isinstance(step, bytes)
            try:
                result = step()
                if result is not None:
                    await result
            except Exception:  # one step's bug must not stall the instance's log
                log.exception("history_step_failed", instance=str(address))

    async def _publish(self, address: Address, entry: InstanceLog, data: bytes) -> bool:
        if not self.allowed(address):
            log.warning("history_not_owner", instance=str(address))
            return False
        if entry.last_seq is None:
            entry.last_seq = await self._last_seq(address)
        js, names = self.nats.js, self.nats.names
        subject = names.history_subject(address)
        headers = {EXPECTED: str(entry.last_seq), MSG_ID: f"{entry.epoch}:{entry.last_seq}"}
        deadline = time.monotonic() + PUBLISH_DEADLINE
        while True:
            try:
                ack = await js.publish(subject, data, stream=names.history_stream,
                                       headers=dict(headers), timeout=2.0)  # fmt: skip
                break
            except nats.js.errors.APIError as exc:
                if exc.err_code in WRONG_LAST:
                    log.warning("history_fenced", instance=str(address), expected=entry.last_seq)
                    return False
                problem = f"{exc.err_code} {exc.description}"
            except (nats.errors.Error, TimeoutError) as exc:
                problem = type(exc).__name__
            if time.monotonic() > deadline or not self.allowed(address):
                log.error("history_unwritable", instance=str(address), problem=problem)
                return False
            await asyncio.sleep(0.1)
        entry.last_seq = ack.seq
        entry.published += 1
        if not entry.fenced:  # forgotten meanwhile: the cache stays marked stale
            _write_seq(self.paths(address), ack.seq)
        return True

    async def flush(self, address: Address) -> None:
        """Until what is queued for the instance is written (or refused)."""
        entry = self.logs.get(address)
        if entry is not None and entry.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await entry.task

    def forget(self, address: Address) -> None:
        """The instance is not ours any more: drop what is queued for it. Frames of its
        process still on their way are not written (no log, or another generation's)."""
        entry = self.logs.pop(address, None)
        if entry is not None:
            entry.fenced = True
            entry.items.clear()
        _invalidate(self.paths(address))


def _cache_fresh(paths: InstancePaths, last: int) -> bool:
    """Whether the local files end exactly at stream sequence `last`, all folded."""
    try:
        if paths.events_jsonl.exists() and paths.events_jsonl.stat().st_size > 0:
            return False
        recorded = int((paths.messages_dir / SEQ_FILE).read_text() or "0")
    except (OSError, ValueError):
        return last == 0 and not paths.base_jsonl.exists()
    return recorded == last


def _write_cache(paths: InstancePaths, base: bytes, last: int) -> None:
    write_atomic(paths.base_jsonl, base)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(paths.events_jsonl)
    _write_seq(paths, last)


def _invalidate(paths: InstancePaths) -> None:
    """The local files may hold turns the stream refused (the child wrote them, and folds
    them into base.jsonl at its shutdown): without the sequence hint the next activation
    rebuilds them from the stream."""
    with contextlib.suppress(OSError):
        os.unlink(paths.messages_dir / SEQ_FILE)


def _write_seq(paths: InstancePaths, seq: int) -> None:
    """A hint, not a record (a wrong one only costs a rebuild): no fsync."""
    path: Path = paths.messages_dir / SEQ_FILE
    with contextlib.suppress(OSError):
        path.write_text(str(seq))
