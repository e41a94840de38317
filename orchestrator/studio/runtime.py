"""The runtime events of a swarm (`runtime-events.jsonl` of every instance), kept in memory for
Studio's trace, graph and chart views: read incrementally (`logview.Reader`), newest
`KEEP` events only, so memory stays bounded however long the daemon runs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from orchestrator.observe import logview
from protocol.endpoints import StateLayout
from protocol.jsontypes import JsonObject

KEEP = 200_000


class RuntimeIndex:
    def __init__(self, layout: StateLayout, swarm: str, keep: int = KEEP) -> None:
        self.layout = layout
        self.swarm = swarm
        self.events: deque[JsonObject] = deque(maxlen=keep)
        self._readers: dict[str, logview.Reader] = {}

    def refresh(self) -> None:
        """Read what was appended since the last look (and files that appeared)."""
        for source in logview.discover(self.layout, self.swarm):
            if source.kind == "events":
                self._readers.setdefault(str(source.path), logview.Reader(source))
        self.add(logview.merged([reader.read_new() for reader in self._readers.values()]))

    def add(self, records: Iterable[logview.Record]) -> None:
        """Runtime-event records, oldest first (a cluster node's come from every node)."""
        for record in records:
            data = dict(record.data)
            data.setdefault("agent", record.source.agent)
            data.setdefault("instanceKey", record.source.instance)
            self.events.append(data)

    def of_trace(self, trace_id: str) -> list[JsonObject]:
        """The events of one trace (a prefix of its id works, like `goondan logs --trace`)."""
        return [e for e in self.events if str(e.get("traceId") or "").startswith(trace_id)]

    def since(self, at: float) -> Iterator[JsonObject]:
        return (e for e in self.events if float(e.get("at") or 0) >= at)
