"""What a control client asks a cluster node about the whole swarm (ARCHITECTURE.md §15):
`goondan cluster status|drain`, and the swarm-wide forms of `status` (every node's processes),
`instance list` (every instance in the history stream), `instance show` (a conversation from
the history stream), `logs` (every node's lines) and `instance delete` (`swarm_delete.py`).
The other nodes are asked through `node_requests.py`; this node answers their asks too.
"""

from __future__ import annotations

import heapq

import msgspec
import nats.errors

from orchestrator.cluster import admin, history_view
from orchestrator.cluster.kvkeys import stream_subjects
from orchestrator.cluster.link import API_TIMEOUT, Nats
from orchestrator.cluster.names import untoken
from orchestrator.cluster.node_logs import NodeLogs
from orchestrator.cluster.node_requests import NodeRequests
from orchestrator.cluster.swarm_delete import SwarmDelete
from orchestrator.control.scope import ControlFailed
from orchestrator.observe.loglines import LogsAsk, decode_page
from orchestrator.supervision.supervisor import Supervisor
from protocol.control import DEACTIVATED, InstanceHistory, LogsQuery, ProcessInfo
from protocol.errors import ErrorCode
from protocol.ids import ProcessKind
from protocol.jsontypes import JsonObject

STATUS = "status"
STATUS_WAIT = 2.0
"""How long `goondan status` waits for another node's table (it says which did not come)."""
LOGS = "logs"
LOGS_WAIT = 5.0
"""How long `goondan logs` waits for another node's lines (it says which did not come)."""
_encode = msgspec.json.Encoder().encode
_decode_rows = msgspec.json.Decoder(list[ProcessInfo]).decode


class SwarmControl:
    def __init__(
        self,
        nats_: Nats,
        partitions: int,
        requests: NodeRequests,
        supervisor: Supervisor,
        own_logs: NodeLogs,
        deleting: SwarmDelete,
    ) -> None:
        self.nats = nats_
        self.partitions = partitions
        self.requests = requests
        self.node = requests.node
        self.supervisor = supervisor
        self.own_logs = own_logs
        self.deleting = deleting

    async def serve(self) -> None:
        await self.requests.serve(STATUS, self._own_processes)
        await self.requests.serve(LOGS, self.own_logs.answer)
        await self.deleting.serve()

    async def delete_instance(self, key: str, agent: str | None) -> JsonObject:
        return await self.deleting.delete(key, agent)

    async def status(self) -> JsonObject:
        result = await admin.cluster_status(self.nats, self.partitions)
        result["answeredBy"] = self.node
        return result

    async def drain(self, node: str) -> JsonObject:
        try:
            return await admin.request_drain(self.nats, node)
        except admin.UnknownNode as exc:
            raise ControlFailed(ErrorCode.E_CLUSTER_NODE_UNKNOWN, str(exc)) from None

    async def processes(self, own: list[ProcessInfo]) -> tuple[list[ProcessInfo], list[str]]:
        """`goondan status` on this node: its own rows, then the other live nodes' (asked at
        once, each given STATUS_WAIT), each with its node; and the nodes whose rows did not
        come."""
        others, unanswered = await self._others()
        return [msgspec.structs.replace(row, node=self.node) for row in own] + others, unanswered

    async def _others(self) -> tuple[list[ProcessInfo], list[str]]:
        tables, unanswered = await self.requests.ask_others(STATUS, b"", STATUS_WAIT, _decode_rows)
        return [row for table in tables.values() for row in table], unanswered

    async def conversation(self, req: InstanceHistory) -> JsonObject:
        """`goondan instance show` on this node: from the swarm's history stream."""
        try:
            return await history_view.instance_history(
                self.nats, req.instance_key, req.agent, req.after
            )
        except history_view.NoHistory:
            which = f"agent {req.agent!r} of " if req.agent else ""
            missing = f"the swarm's history has no {which}instance {req.instance_key!r}"
            raise ControlFailed(ErrorCode.E_INSTANCE_NOT_FOUND,
                                f"{missing}; see goondan instance list") from None  # fmt: skip
        except (nats.errors.Error, TimeoutError) as exc:
            unreadable = f"the swarm's history stream is unreadable now ({type(exc).__name__})"
            raise ControlFailed(ErrorCode.E_CLUSTER_UNAVAILABLE, unreadable) from None

    async def logs(self, req: LogsQuery) -> JsonObject:
        """`goondan logs` on this node: its own lines and every other live node's."""
        ask = LogsAsk(agent=req.agent, instance=req.instance, trace=req.trace, since=req.since,
                      follower=req.follower)  # fmt: skip
        own = await self.own_logs.page(ask)
        others, unanswered = await self.requests.ask_others(LOGS, _encode(ask), LOGS_WAIT,
                                                            decode_page)  # fmt: skip
        got = {self.node: own, **others}
        lines = heapq.merge(*(page.lines for page in got.values()), key=lambda line: line.at)
        return {
            "lines": [msgspec.to_builtins(line) for line in lines],
            "dropped": {node: page.dropped for node, page in got.items() if page.dropped},
            "unanswered": unanswered,
        }

    async def instances(self) -> list[JsonObject]:
        """`goondan instance list` on this node: every instance in the swarm's history stream,
        with the status and node of its process where one runs (else deactivated)."""
        names = self.nats.names
        try:
            subjects = await stream_subjects(self.nats.nc, names.history_stream,
                                             f"{names.prefix}.h.*.*", API_TIMEOUT)  # fmt: skip
        except (nats.errors.Error, TimeoutError) as exc:
            unreadable = f"the swarm's history stream is unreadable now ({type(exc).__name__})"
            raise ControlFailed(ErrorCode.E_CLUSTER_UNAVAILABLE, unreadable) from None
        now = self.supervisor.clock()
        own = [msgspec.structs.replace(e.info(now), node=self.node) for e in self.supervisor.table]
        others, _ = await self._others()
        running = {(p.name, p.instance_key): p for p in own + others
                   if p.kind == ProcessKind.AGENT and p.pid is not None}  # fmt: skip
        rows: list[JsonObject] = []
        for subject in subjects:
            agent, key = (untoken(part) for part in subject.split(".")[-2:])
            process = running.get((agent, key))
            rows.append({"instanceKey": key, "agent": agent,
                         "status": process.status if process else DEACTIVATED,
                         "node": process.node if process else None})  # fmt: skip
        return sorted(rows, key=lambda r: (str(r["instanceKey"]), str(r["agent"])))

    async def _own_processes(self, _request: bytes) -> bytes:
        now = self.supervisor.clock()
        table = self.supervisor.table
        return _encode([msgspec.structs.replace(e.info(now), node=self.node) for e in table])
