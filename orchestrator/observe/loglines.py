"""Log lines that travel between the nodes of a cluster and to the CLI (`goondan logs` on a
cluster node, orchestrator/cluster/node_logs.py): what is asked, one line with the node that
wrote it, and a bounded page of them. Plain structs, so the CLI reads them without cluster code.
"""

from __future__ import annotations

from typing import Any

import msgspec

from orchestrator.observe import logview


class LogsAsk(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    agent: str | None = None
    instance: str | None = None
    trace: str | None = None
    since: float | None = None
    follower: str | None = None
    """Later asks with the same id get only the lines written since."""


class LogLine(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    at: float
    node: str
    kind: logview.SourceKind
    swarm: str
    data: dict[str, Any]
    agent: str | None = None
    instance: str | None = None

    def record(self) -> logview.Record:
        source = logview.LogSource(logview.NO_PATH, self.kind, self.swarm, self.agent,
                                   self.instance)  # fmt: skip
        return logview.Record(self.at, source, self.data)


class LogsPage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    lines: list[LogLine]
    dropped: int = 0
    """Older matching lines left out of this page."""


encode = msgspec.json.Encoder().encode
decode_page = msgspec.json.Decoder(LogsPage).decode
decode_ask = msgspec.json.Decoder(LogsAsk).decode
