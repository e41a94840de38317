"""Runtime events (`turn.*`, `step.*`, `tool.*`, extension events): recorded and delivered.

Recording appends each encoded event to an in-memory buffer; `flush()` writes the buffer to
`messages/runtime-events.jsonl` in one `write()`. The runtime flushes at its durability points
(turn end, before a reply leaves the process, close) and whenever the buffer holds
`FLUSH_EVERY` events, so a long turn never holds much in memory. These are observability
records, not conversation state: a SIGKILL may lose the tail of the current turn's runtime
events, never a message (see `agent_process.store` for those).

Subscribers (`api.events.on`) receive every event as a plain dict, synchronously; an `async`
subscriber is scheduled as a task. A subscriber that raises is logged and never harms the turn.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bundles import redact
from protocol.errors import ErrorInfo
from protocol.private import open_private, private_dir

FLUSH_EVERY = 512
_log = structlog.get_logger("goondan.events")
_encoder = msgspec.json.Encoder()

Subscriber = Callable[[dict[str, Any]], Any]


class RuntimeEvent(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    type: str
    at: float
    agent: str
    instance_key: str
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    turn_id: str | None = None
    event_id: str | None = None
    step: int | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    status: str | None = None
    duration_ms: float | None = None
    usage: dict[str, int] | None = None
    steps: int | None = None
    error: ErrorInfo | None = None
    data: dict[str, Any] | None = None


class EventBus:
    """Buffers runtime events for the jsonl file and hands them to subscribers."""

    def __init__(
        self, path: Path | None, *, agent: str, instance_key: str, sink: int | None = None
    ) -> None:
        self.agent = agent
        self.instance_key = instance_key
        self._path = path
        self._sink = sink
        """An open fd written instead of `path` (the caller's to close); the fork server's
        rehearsal passes /dev/null."""
        self._fd: int | None = None
        self._buffer: list[bytes] = []
        self._subscribers: list[tuple[str, Subscriber, str]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.current_trace_id: str | None = None
        self.meter: Callable[[RuntimeEvent], None] | None = None
        """Counts every event for the daemon's metrics (`agent_process.meter`)."""

    def open(self) -> None:
        if self._sink is not None:
            self._fd = self._sink
        elif self._path is not None:
            private_dir(self._path.parent)
            self._fd = open_private(self._path, os.O_WRONLY | os.O_APPEND)

    def close(self) -> None:
        self.flush()
        if self._fd is not None and self._fd != self._sink:
            os.close(self._fd)
        self._fd = None

    # -- producing ----------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """False when nothing records or listens: producers may skip building events."""
        return self._fd is not None or bool(self._subscribers) or self.meter is not None

    def emit(self, event: RuntimeEvent) -> None:
        if event.type in _SPAN_EVENTS:
            _bind_log_span(event)
        if self.meter is not None:
            self.meter(event)
        if self._fd is not None:
            line = _encoder.encode(event)
            masker = redact.current()
            if masker:  # tool args/results and errors may quote a secret: mask the whole line
                line = masker.json_bytes(line)
            self._buffer.append(line)
            if len(self._buffer) >= FLUSH_EVERY:
                self.flush()
        if self._subscribers:
            self._deliver(event)

    def emit_custom(self, event_type: str, data: dict[str, Any] | None, *, owner: str) -> None:
        """An event emitted by an extension (`api.events.emit`)."""
        self.record(event_type, {"extension": owner, **(data or {})})

    def record(self, event_type: str, data: dict[str, Any]) -> None:
        """A runtime event of this process's own (a model call's usage, a fallback), in the
        current turn's trace."""
        if not self.active:
            return
        self.emit(
            RuntimeEvent(
                type=event_type,
                at=time.time(),
                agent=self.agent,
                instance_key=self.instance_key,
                trace_id=self.current_trace_id,
                data=data,
            )
        )

    def flush(self) -> None:
        if not self._buffer or self._fd is None:
            self._buffer.clear()
            return
        data = b"\n".join(self._buffer) + b"\n"
        self._buffer.clear()
        os.write(self._fd, data)

    # -- consuming ----------------------------------------------------------------------

    def on(self, pattern: str, fn: Subscriber, *, owner: str) -> None:
        if not callable(fn):
            raise TypeError(f"events.on({pattern!r}, ...) needs a callable")
        self._subscribers.append((pattern, fn, owner))

    def _deliver(self, event: RuntimeEvent) -> None:
        payload: dict[str, Any] | None = None
        for pattern, fn, owner in self._subscribers:
            if not _matches(pattern, event.type):
                continue
            if payload is None:
                payload = msgspec.to_builtins(event)
            try:
                result = fn(dict(payload))
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(self._task_done(owner, event.type))
            except Exception as exc:
                _log.error(
                    "subscriber_failed", extension=owner, event_type=event.type, error=repr(exc)
                )

    def _task_done(self, owner: str, event_type: str) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                _log.error(
                    "subscriber_failed",
                    extension=owner,
                    event_type=event_type,
                    error=repr(task.exception()),
                )

        return done

    async def drain(self) -> None:
        """Wait for async subscribers still running (at close)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


_SPAN_EVENTS = frozenset(
    {"turn.started", "step.started", "tool.called", "turn.completed", "turn.failed"}
)


def _bind_log_span(event: RuntimeEvent) -> None:
    """Log lines written during a turn carry its traceId and the latest span started in this
    task (turn, step or tool); the bus is where every span start passes anyway."""
    if event.type in ("turn.completed", "turn.failed"):
        structlog.contextvars.unbind_contextvars("traceId", "spanId")
    elif event.trace_id is not None:
        structlog.contextvars.bind_contextvars(traceId=event.trace_id, spanId=event.span_id)


def _matches(pattern: str, event_type: str) -> bool:
    if pattern in ("*", event_type):
        return True
    return pattern.endswith(".*") and event_type.startswith(pattern[:-1])
