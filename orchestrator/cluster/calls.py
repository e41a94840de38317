"""Deferred calls that outlive their node (ARCHITECTURE.md §10, §15).

The agent process keeps a suspended call in its instance's `pending-calls/` directory (a local
file, a cache in cluster mode). The node that learns of it (`deferred_submit`) copies it to the
swarm's `calls` bucket under `<agent>.<key>.<call id>`; when the call is answered the key is
deleted. Before an instance's process starts on a node (an activation after its owner died),
the calls still pending in the bucket are written back into its `pending-calls/`, so the
process resumes the suspended turn as after a crash on one machine, and `goondan calls list`
and `resolve` on the new owner see the call with its id unchanged.

The bucket is also what makes calls a swarm's and not a node's: `calls list` on any node lists
it, and an answer given to a node that does not run the call's instance is forwarded to the
one that does (`answers.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import structlog

from orchestrator.calls.deferred_remote import Forward
from orchestrator.cluster.answers import Answers
from orchestrator.cluster.link import Nats
from orchestrator.cluster.names import token
from protocol.durable import write_atomic
from protocol.endpoints import InstancePaths, path_segment
from protocol.ids import Address, agent_address
from protocol.jsonrpc import ANSWER_SUFFIX, PENDING_SUFFIX, PendingCall

log = structlog.get_logger("goondan.cluster.calls")
SWEEP_EVERY = 600.0
SWEEP_GRACE = 600.0
"""A call is swept this long after it expired: its agent, if live, failed it at expiry and its
owner had time to restore it into a process that fails it the same way."""


def call_key(agent: str, instance_key: str, call_id: str) -> str:
    return f"{token(agent)}.{token(instance_key)}.{token(call_id)}"


class CallMirror:
    def __init__(
        self,
        nats_: Nats,
        runs: Callable[[Address], bool] | None = None,
        paths: Callable[[Address], InstancePaths] | None = None,
        answers: Answers | None = None,
    ) -> None:
        self.nats = nats_
        self.runs = runs
        """Whether this node runs an instance now (the node's `admits`)."""
        self.paths = paths
        self.answers = answers
        self._tasks: set[asyncio.Future[None]] = set()

    def pending(self, call: PendingCall, then: Callable[[], None]) -> None:
        """The call suspended its turn here: keep it in the bucket, then announce it (in the
        background: the daemon's loop must not wait on NATS)."""
        key = call_key(call.agent, call.instance_key, call.id)

        async def keep() -> None:
            await self._put(key, msgspec.json.encode(call))
            then()

        self._background(keep())

    def answered(self, call: PendingCall) -> None:
        key = call_key(call.agent, call.instance_key, call.id)
        self._background(self._delete(key))

    async def restore(self, address: Address, paths: InstancePaths) -> int:
        """Write the instance's pending calls from the bucket into its `pending-calls/`
        (those not answered here already); how many were written."""
        prefix = f"{token(address.name)}.{token(address.instance_key)}."
        written = 0
        async for raw, call in self._calls(prefix):
            stem = path_segment(call.id)
            pending = paths.pending_calls_dir / (stem + PENDING_SUFFIX)
            if pending.exists() or (paths.pending_calls_dir / (stem + ANSWER_SUFFIX)).exists():
                continue
            pending.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(write_atomic, pending, raw)
            written += 1
        if written:
            log.info("deferred_calls_restored", instance=str(address), calls=written)
        return written

    async def swarm_calls(self) -> list[PendingCall]:
        return [call async for _, call in self._calls()]

    async def locate(self, call_id: str) -> PendingCall | None:
        """The call when another node runs its instance; when this node does, its files are
        written here first (an instance not activated since its partition moved) and None."""
        assert self.runs is not None
        assert self.paths is not None
        suffix = "." + token(call_id)
        found = [call async for _, call in self._calls(suffix=suffix) if call.id == call_id]
        if not found:
            return None
        address = agent_address(found[0].agent, found[0].instance_key)
        if not self.runs(address):
            return found[0]
        await self.restore(address, self.paths(address))
        return None

    async def forward(self, call: PendingCall, forward: Forward) -> Any:
        assert self.answers is not None
        return await self.answers.forward(forward)

    async def sweep(self, now: float) -> int:
        """Delete the calls that expired more than SWEEP_GRACE ago: an agent fails an expired
        call in its own directory and tells no node, so without this the bucket would keep it
        for good. Any node may sweep (a delete is idempotent); how many were deleted."""
        swept = 0
        async for _, call in self._calls():
            if call.expires_at + SWEEP_GRACE <= now:
                await self._delete(call_key(call.agent, call.instance_key, call.id))
                swept += 1
        if swept:
            log.info("deferred_calls_swept", calls=swept)
        return swept

    async def _calls(
        self, prefix: str = "", suffix: str = ""
    ) -> AsyncIterator[tuple[bytes, PendingCall]]:
        """(stored bytes, call) for each readable call whose key starts with `prefix` and ends
        with `suffix`."""
        for key, raw in (await self.nats.entries("calls", prefix, suffix)).items():
            try:
                call = msgspec.json.decode(raw, type=PendingCall)
            except msgspec.DecodeError:
                log.warning("deferred_call_unreadable", key=key)
                continue
            yield raw, call

    async def sweep_forever(self, clock: Callable[[], float]) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await self.sweep(clock())

    async def _put(self, key: str, data: bytes) -> None:
        try:
            await self.nats.calls.put(key, data)
        except (nats.errors.Error, TimeoutError) as exc:
            log.error("deferred_call_not_mirrored", key=key, error=type(exc).__name__)

    async def _delete(self, key: str) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await self.nats.calls.delete(key)

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
