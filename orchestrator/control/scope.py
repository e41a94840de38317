"""How far a control request sees: this machine, or every node of the swarm's cluster.

`status`, `instance list|show|delete`, `logs` and `cluster status|drain` ask the daemon's
`SwarmScope`, chosen once by the composition root (orchestrator/daemon.py): `ThisMachine` on
one machine, `orchestrator.cluster.swarm_control.SwarmControl` on a cluster node. The control
server never asks which mode it runs in (ARCHITECTURE.md §9, §15).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from orchestrator.control import localstate
from orchestrator.control.instance_delete import delete_here
from orchestrator.supervision.supervisor import Supervisor
from protocol.control import DEACTIVATED, InstanceHistory, LogsQuery, ProcessInfo
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.jsontypes import JsonObject


class ControlFailed(Exception):
    """A control request's coded error (its reply carries it as data)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = ErrorInfo(code=code, message=message)


class SwarmScope(Protocol):
    async def status(self) -> JsonObject:
        """`goondan cluster status`."""
        ...

    async def drain(self, node: str) -> JsonObject:
        """`goondan cluster drain NODE`."""
        ...

    async def processes(self, own: list[ProcessInfo]) -> tuple[list[ProcessInfo], list[str]]:
        """`goondan status`: the rows of every process in scope, this daemon's (`own`) first,
        and the nodes whose rows did not come."""
        ...

    async def conversation(self, req: InstanceHistory) -> JsonObject:
        """`goondan instance show` answered by the daemon (a cluster's history stream)."""
        ...

    async def logs(self, req: LogsQuery) -> JsonObject:
        """`goondan logs` answered by the daemon (every live node's lines, merged by time)."""
        ...

    async def instances(self) -> list[JsonObject]:
        """`goondan instance list`: every instance, with the status of its process."""
        ...

    async def delete_instance(self, key: str, agent: str | None) -> JsonObject:
        """`goondan instance delete`: stop its processes and remove its state everywhere."""
        ...


class ThisMachine:
    """The scope of a daemon that runs on one machine: its process table and state directory.
    What only a cluster answers is refused with the fix (the CLI reads one machine's
    conversations and logs from its files, not through the daemon)."""

    def __init__(self, supervisor: Supervisor, layout: StateLayout, swarm: str) -> None:
        self.supervisor = supervisor
        self.layout = layout
        self.swarm = swarm

    async def status(self) -> JsonObject:
        raise _not_a_cluster()

    async def drain(self, node: str) -> JsonObject:
        raise _not_a_cluster()

    async def conversation(self, req: InstanceHistory) -> JsonObject:
        raise _not_a_cluster()

    async def logs(self, req: LogsQuery) -> JsonObject:
        raise _not_a_cluster()

    async def processes(self, own: list[ProcessInfo]) -> tuple[list[ProcessInfo], list[str]]:
        return own, []

    async def instances(self) -> list[JsonObject]:
        """The instance directories (orchestrator/control/localstate.py) with their processes'
        status; one the daemon holds no process for is `deactivated` (its next event starts
        it)."""
        # a worker thread walks the directories: with a million hibernated instances the walk
        # takes seconds, and the loop must keep routing (and answering heartbeats) meanwhile
        rows = await asyncio.to_thread(localstate.instances, self.layout, self.swarm)
        known = {
            self.layout.instance_paths(self.swarm, e.address.instance_key, e.address.name).root: e
            for e in self.supervisor.table
        }
        for row in rows:
            entry = known.get(Path(str(row["path"])))
            if entry is None:
                row["status"] = DEACTIVATED
                continue
            row.update(instanceKey=entry.address.instance_key, agent=entry.address.name,
                       status=entry.info().status)  # fmt: skip
        return rows

    async def delete_instance(self, key: str, agent: str | None) -> JsonObject:
        done = await delete_here(self.supervisor, self.layout, self.swarm, key, agent)
        if done is None:
            missing = f"swarm {self.swarm!r} has no instance {key!r}"
            raise ControlFailed(ErrorCode.E_INSTANCE_NOT_FOUND, missing)
        return {"stopped": done.stopped, "deleted": done.deleted}


def _not_a_cluster() -> ControlFailed:
    return ControlFailed(
        ErrorCode.E_CLUSTER_CONFIG,
        "this daemon runs on one machine: "
        "start it with --cluster URLS --node NAME to join a cluster",
    )
