"""Requests from one node of a swarm to another (ARCHITECTURE.md §15).

Each node answers on core-NATS subjects of its own, `goondan.<swarm>.node.<node>.<what>.<from>`:
an answer to a deferred call it runs (`answers.py`), its process table (`goondan status` on any
node lists every node's), its log lines (`node_logs.py`), an instance to delete
(`swarm_delete.py`). `<from>` is the asking node, which the NATS server vouches for when each
node has its own user (a node may publish only subjects ending in its name): a request whose
subject names no node is dropped, and the actions (`audit`) are logged with their sender.
A request to a node that is gone has no responder, which the asker sees at once (`None`)
rather than after its timeout. Each request is handled in a task of its own: one
subscription's callbacks run one at a time, and an answer waiting for a resumed turn must not
hold up the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from orchestrator.cluster.leases import nodes_of
from orchestrator.cluster.link import Nats
from protocol.errors import ErrorCode

log = structlog.get_logger("goondan.cluster.requests")
Handler = Callable[[bytes], Awaitable[bytes]]
T = TypeVar("T")


class NodeRequests:
    def __init__(self, nats_: Nats, node: str) -> None:
        self.nats = nats_
        self.node = node
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Future[None]] = set()

    async def serve(self, what: str, handler: Handler, audit: bool = False) -> None:
        names = self.nats.names

        async def on_request(msg: Msg) -> None:
            try:
                sender = names.sender_of(msg.subject)
            except ValueError:
                log.warning("node_request_dropped", code=ErrorCode.E_CLUSTER_NODE_UNKNOWN,
                            what=what, subject=msg.subject[:200])  # fmt: skip
                return
            if audit:
                log.info("node_request", what=what, sender=sender)
            task = asyncio.ensure_future(_respond(msg, handler))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        subject = names.node_requests(self.node, what)
        self._subs.append(await self.nats.nc.subscribe(subject, cb=on_request))

    async def ask(self, node: str, what: str, data: bytes, wait_s: float) -> bytes | None:
        """`node`'s reply; None when it has no responder (gone). Raises TimeoutError when it
        took the request and did not reply in time."""
        subject = self.nats.names.node_subject(node, what, self.node)
        try:
            msg = await self.nats.nc.request(subject, data, timeout=wait_s)
        except nats.errors.NoRespondersError:
            return None
        except nats.errors.TimeoutError:
            raise TimeoutError(f"node {node} did not reply within {wait_s:g} s") from None
        return msg.data

    async def ask_others(
        self, what: str, data: bytes, wait_s: float, decode: Callable[[bytes], T]
    ) -> tuple[dict[str, T], list[str]]:
        """Every other live node's reply, asked at once and decoded; and the nodes that gave
        none (gone, or not in time) or one `decode` refused (msgspec.DecodeError)."""
        others = sorted({r.node for r in await nodes_of(self.nats)} - {self.node})

        async def one(node: str) -> bytes | None:
            with contextlib.suppress(TimeoutError, nats.errors.Error):
                return await self.ask(node, what, data, wait_s)
            return None

        replies: dict[str, T] = {}
        unanswered: list[str] = []
        for node, raw in zip(others, await asyncio.gather(*(one(n) for n in others)), strict=True):
            try:
                if raw is not None:
                    replies[node] = decode(raw)
                    continue
            except msgspec.DecodeError:
                pass
            unanswered.append(node)
        return replies, unanswered

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _respond(msg: Msg, handler: Handler) -> None:
    reply = await handler(msg.data)
    with contextlib.suppress(nats.errors.Error):
        await msg.respond(reply)
