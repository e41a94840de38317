"""`goondan instance delete KEY [--agent A]` on a cluster node (ARCHITECTURE.md §15): the
instance goes from every node and from the swarm's streams.

Each live node stops the instance's processes it runs and removes its directory there (its
cache and its workspace; the asked node does the same itself), through `node_requests.py`
(`delete`). Then the instance's subjects of the history stream are purged and its pending calls
leave the `calls` bucket. An event still queued for it starts it again, on an empty
conversation.
"""

from __future__ import annotations

import asyncio

import msgspec
import nats.errors
import nats.js.errors

from orchestrator.cluster.kvkeys import stream_subjects
from orchestrator.cluster.link import API_TIMEOUT, Nats
from orchestrator.cluster.names import token
from orchestrator.cluster.node_requests import NodeRequests
from orchestrator.control.instance_delete import DeletedHere, delete_here
from orchestrator.control.scope import ControlFailed
from orchestrator.supervision.supervisor import Supervisor
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from protocol.jsontypes import JsonObject

DELETE = "delete"
DELETE_WAIT = 30.0
"""A node stops the instance's processes first (a turn in progress gets the grace period)."""


class DeleteAsk(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    agent: str | None = None


_encode = msgspec.json.Encoder().encode
_decode_ask = msgspec.json.Decoder(DeleteAsk).decode
_decode_done = msgspec.json.Decoder(DeletedHere | None).decode


class SwarmDelete:
    def __init__(
        self, nats_: Nats, requests: NodeRequests, supervisor: Supervisor, layout: StateLayout
    ) -> None:
        self.nats = nats_
        self.requests = requests
        self.supervisor = supervisor
        self.layout = layout

    async def serve(self) -> None:
        await self.requests.serve(DELETE, self._here, audit=True)

    async def _here(self, data: bytes) -> bytes:
        try:
            ask = _decode_ask(data)
        except msgspec.DecodeError:
            return _encode(None)
        return _encode(await self._delete_here(ask))

    async def _delete_here(self, ask: DeleteAsk) -> DeletedHere | None:
        return await delete_here(self.supervisor, self.layout, self.nats.names.swarm, ask.key,
                                 ask.agent)  # fmt: skip

    async def delete(self, key: str, agent: str | None) -> JsonObject:
        ask = DeleteAsk(key=key, agent=agent)
        node = self.requests.node
        here = await self._delete_here(ask)
        others, unanswered = await self.requests.ask_others(DELETE, _encode(ask), DELETE_WAIT,
                                                            _decode_done)  # fmt: skip
        done: dict[str, DeletedHere | None] = {node: here, **others}
        try:
            purged = await self._purge(key, agent)
            calls = await self._forget_calls(key, agent)
        except (nats.errors.Error, TimeoutError) as exc:
            unreadable = f"the swarm's streams are unreachable now ({type(exc).__name__})"
            raise ControlFailed(ErrorCode.E_CLUSTER_UNAVAILABLE, unreadable) from None
        found = {n: d for n, d in done.items() if d is not None}
        if not found and not purged:
            missing = f"swarm {self.nats.names.swarm!r} has no instance {key!r}"
            raise ControlFailed(ErrorCode.E_INSTANCE_NOT_FOUND, missing)
        return {
            "stopped": [f"{n}: {s}" for n, d in found.items() for s in d.stopped],
            "deleted": [f"{n}: {p}" for n, d in found.items() for p in d.deleted],
            "purged": purged,
            "calls": calls,
            "unanswered": unanswered,
        }

    async def _purge(self, key: str, agent: str | None) -> int:
        """Drop the instance's subjects from the history stream; how many there were."""
        names = self.nats.names
        agents = token(agent) if agent is not None else "*"
        wanted = f"{names.prefix}.h.{agents}.{token(key)}"
        subjects = await stream_subjects(self.nats.nc, names.history_stream, wanted, API_TIMEOUT)
        await asyncio.gather(
            *(self.nats.js.purge_stream(names.history_stream, subject=s) for s in subjects)
        )
        return len(subjects)

    async def _forget_calls(self, key: str, agent: str | None) -> int:
        """Drop the instance's pending calls from the `calls` bucket; how many there were."""
        prefix = f"{token(agent)}." if agent is not None else ""
        calls = await self.nats.entries("calls", prefix)
        keys = [k for k in calls if k.split(".")[1:2] == [token(key)]]  # <agent>.<key>.<id>
        for k in keys:
            try:
                await self.nats.calls.delete(k)
            except nats.js.errors.KeyNotFoundError:
                continue
        return len(keys)
