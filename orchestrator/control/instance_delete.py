"""Deleting one instance on this machine (`goondan instance delete`, ARCHITECTURE.md §9): stop
its processes, then remove its state directory, conversation and workspace included. A cluster
node does this on every node and also drops the instance from the swarm's streams
(orchestrator/cluster/swarm_control.py)."""

from __future__ import annotations

import asyncio

import msgspec

from orchestrator.control import localstate
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.trees import remove_tree
from protocol.endpoints import StateLayout
from protocol.ids import ProcessKind
from protocol.messages import ShutdownReason


class DeletedHere(msgspec.Struct, frozen=True, kw_only=True):
    stopped: list[str]
    """The processes stopped (addresses)."""
    deleted: list[str]
    """The directories removed."""


async def delete_here(
    supervisor: Supervisor, layout: StateLayout, swarm: str, key: str, agent: str | None
) -> DeletedHere | None:
    """Stop the instance's processes here and remove its directory; None when it has neither
    here."""
    chosen = [
        e
        for e in supervisor.table
        if e.address.kind is ProcessKind.AGENT
        and e.address.instance_key == key
        and (agent is None or e.address.name == agent)
    ]
    target = localstate.instance_dir(layout, swarm, key, agent)
    if not chosen and not target.exists():
        return None
    await asyncio.gather(*(supervisor.stop(e, ShutdownReason.RESTART) for e in chosen))
    existed = target.exists()
    await remove_tree(target)
    return DeletedHere(stopped=[str(e.address) for e in chosen],
                       deleted=[str(target)] if existed else [])  # fmt: skip
