"""Where a turn's `delta` frames go (ARCHITECTURE.md §4): to whoever waits for its reply.

A delta is passed on only when it comes from the process the request book says serves its
correlation id (no other process can write into someone's stream), and then to:
- the watcher registered for that correlation id: a control client streaming a `send`
  (orchestrator/ingress/streams.py), or
- the requester's process, when it is a connector that reads `delta` frames (its `hello` said
  protocol STREAM_PROTOCOL or later); it asked by emitting with a delta callback.
Anything else is dropped and counted: deltas are best-effort and never journaled, and the
reply that follows carries the whole answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from orchestrator.supervision.mailboxes import RequestBook
from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ProtocolError
from protocol.ids import ORCHESTRATOR, Address, ProcessKind
from protocol.messages import STREAM_PROTOCOL, Delta, Message
from protocol.stream import StreamDelta

log = structlog.get_logger("goondan.router")
Sink = Callable[[StreamDelta], None]


@dataclass(slots=True)
class DeltaRoutes:
    book: RequestBook
    ready: Callable[[Address], ProcessEntry | None]
    """The requester's process, if it is ready for frames."""
    send: Callable[[ProcessEntry, Message], bool]
    address: Callable[[str], Address]
    """Parse a requester address (raises ProtocolError)."""
    _watchers: dict[str, Sink] = field(default_factory=dict)
    passed: int = 0
    dropped: int = 0
    foreign: int = 0
    """Deltas from a process that does not serve their correlation id (logged)."""

    def watch(self, correlation_id: str, sink: Sink) -> None:
        """Hand the deltas of request `correlation_id` to `sink` (until `unwatch`)."""
        self._watchers[correlation_id] = sink

    def unwatch(self, correlation_id: str) -> None:
        self._watchers.pop(correlation_id, None)

    def route(self, sender: ProcessEntry, delta: StreamDelta) -> None:
        request = self.book.get(delta.correlation_id)
        if request is None or request.server != sender.address:
            self._foreign(sender, delta, request is None)
            return
        sink = self._watchers.get(delta.correlation_id)
        if sink is not None:
            self.passed += 1
            sink(delta)
            return
        entry = self._connector(request.requester)
        if entry is None or entry.protocol < STREAM_PROTOCOL:
            self.dropped += 1  # nobody asked (a client gone, a redelivery after a restart)
            return
        self.passed += 1
        self.send(entry, Delta(from_=ORCHESTRATOR, to=entry.id_text, payload=delta))

    def _connector(self, requester: str) -> ProcessEntry | None:
        try:
            address = self.address(requester)
        except ProtocolError:
            return None
        return self.ready(address) if address.kind is ProcessKind.CONNECTOR else None

    def _foreign(self, sender: ProcessEntry, delta: StreamDelta, unknown: bool) -> None:
        if unknown:  # a turn whose request is answered, cut or timed out: nobody waits
            self.dropped += 1
            return
        self.foreign += 1
        if self.foreign <= 10 or self.foreign % 1000 == 0:
            log.warning("delta_foreign", sender=sender.id_text, dropped=self.foreign,
                        correlation_id=delta.correlation_id[:80])  # fmt: skip
