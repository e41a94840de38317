"""`goondan logs` on a cluster node: the lines of every node of the swarm (ARCHITECTURE.md §15).

Each node's logs stay in its own files; the asked node reads its own and asks every other live
node (`node_requests.py`, `logs`) for theirs with the same filter, and merges them by time,
each line naming its node. A page is bounded (PAGE_LINES lines, the newest kept, and
PAGE_BYTES, under NATS's default 1 MB message): how many older matching lines were left out
is said. `--follow` names a follower: each node keeps how far it read for that follower
(FOLLOWER_IDLE seconds at most between asks), so a later ask sends only what was written since.
"""

from __future__ import annotations

import asyncio
import time

import msgspec

from orchestrator.observe import logview
from orchestrator.observe.loglines import LogLine, LogsAsk, LogsPage, decode_ask, encode
from protocol.endpoints import StateLayout

PAGE_LINES = 5000
PAGE_BYTES = 768 * 1024
FOLLOWER_IDLE = 60.0
MAX_FOLLOWERS = 32


class NodeLogs:
    def __init__(self, layout: StateLayout, swarm: str, node: str) -> None:
        self.layout = layout
        self.swarm = swarm
        self.node = node
        self._followers: dict[str, tuple[logview.LogTail, float]] = {}

    async def page(self, ask: LogsAsk) -> LogsPage:
        """This node's matching lines (its files are read in a worker thread)."""
        return await asyncio.to_thread(self._page, ask)

    def _page(self, ask: LogsAsk) -> LogsPage:
        keep = logview.Filter(agent=ask.agent, instance=ask.instance, trace=ask.trace,
                              since=ask.since)  # fmt: skip
        records = [r for r in self._tail(ask.follower).read_new() if keep(r)]
        dropped = max(0, len(records) - PAGE_LINES)
        lines = [self._line(r) for r in records[dropped:]]
        size = sum(len(encode(line)) for line in lines)
        while lines and size > PAGE_BYTES:  # the newest lines are the ones kept
            size -= len(encode(lines[0]))
            lines.pop(0)
            dropped += 1
        return LogsPage(lines=lines, dropped=dropped)

    def _tail(self, follower: str | None) -> logview.LogTail:
        if follower is None:
            return logview.LogTail(self.layout, self.swarm)
        now = time.monotonic()
        for stale in [k for k, (_, used) in self._followers.items() if now - used > FOLLOWER_IDLE]:
            del self._followers[stale]
        tail = self._followers.get(follower, (None, 0.0))[0]
        if tail is None:
            if len(self._followers) >= MAX_FOLLOWERS:  # the least recently asked goes
                oldest = min(self._followers, key=lambda k: self._followers[k][1])
                del self._followers[oldest]
            tail = logview.LogTail(self.layout, self.swarm)
        self._followers[follower] = (tail, now)
        return tail

    def _line(self, record: logview.Record) -> LogLine:
        source = record.source
        return LogLine(at=record.at, node=self.node, kind=source.kind, swarm=source.swarm,
                       data=record.data, agent=source.agent, instance=source.instance)  # fmt: skip

    async def answer(self, data: bytes) -> bytes:
        """Another node's ask (`node_requests.py`); an unreadable one gets an empty page."""
        try:
            ask = decode_ask(data)
        except msgspec.DecodeError:
            return encode(LogsPage(lines=[]))
        return encode(await self.page(ask))
