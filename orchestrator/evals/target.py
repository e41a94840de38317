"""Where an eval's cases run: the daemon started for the run (in this process, its control
context) or, with `--attach`, a daemon already running (over its control socket, as `goondan
send` and `goondan calls answer` talk to it). The runner sees one small interface."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from typing import Any, Protocol

import msgspec

from orchestrator.calls.auth import Answerer
from orchestrator.calls.deferred import DeferredCallError
from orchestrator.control import client
from orchestrator.control.server import ControlContext
from orchestrator.ingress.send import SendFailed, send_and_wait
from protocol.control import CallsResolve, ControlRequest, OrchestratorInfo, SendText, StatusQuery
from protocol.endpoints import StateLayout
from protocol.events import AgentEvent
from protocol.jsonrpc import JsonRpcResponse


class TargetFailed(Exception):
    """A request the daemon refused or did not answer: the case fails with this."""


class Target(Protocol):
    swarm: str
    layout: StateLayout
    timeout_ms: int

    async def send(self, req: SendText) -> AgentEvent: ...

    async def answer(self, call_id: str, result: Any, wait_s: float) -> AgentEvent: ...

    async def pids(self, key: str) -> tuple[int, ...]: ...


class LocalTarget:
    """The daemon started for the run: its ingress and deferred-call index, in-process."""

    def __init__(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.swarm, self.layout = ctx.info.swarm, ctx.layout
        self.timeout_ms = ctx.supervisor.settings.request_timeout_ms

    async def send(self, req: SendText) -> AgentEvent:
        try:
            answer = await send_and_wait(self.ctx, req)
        except SendFailed as exc:
            raise TargetFailed(f"{exc.code}: {exc.message}") from None
        if not isinstance(answer, AgentEvent):
            raise TargetFailed("the turn gave no reply")
        return answer

    async def answer(self, call_id: str, result: Any, wait_s: float) -> AgentEvent:
        who = Answerer(via="cli", by=getpass.getuser())
        answer = JsonRpcResponse(id=call_id, result=result)
        try:
            # wait=True: the resumed turn's reply (or its next call) comes back here
            resumed = await self.ctx.deferred.resolve(call_id, answer, wait_s, who=who, wait=True)
        except DeferredCallError as exc:
            raise TargetFailed(f"{exc.code}: {exc.message}") from None
        if not isinstance(resumed, AgentEvent):
            raise TargetFailed("the resumed turn gave no reply")
        return resumed

    async def pids(self, key: str) -> tuple[int, ...]:
        return tuple(sorted(e.pid for e in self.ctx.supervisor.table
                            if e.address.instance_key == key and e.pid is not None))  # fmt: skip


class RemoteTarget:
    """`--attach`: a running daemon of the swarm, over its control socket (blocking pyzmq
    calls, each in a worker thread, so N cases still run at once)."""

    def __init__(self, info: OrchestratorInfo, timeout_ms: int = 120_000) -> None:
        self.info = info
        self.swarm = info.swarm
        self.layout = StateLayout.from_env(Path(info.state_root))
        self.timeout_ms = timeout_ms

    async def _call(self, req: ControlRequest, timeout_s: float) -> Any:
        try:
            reply = await asyncio.to_thread(client.call, self.info, req, timeout_s + 5)
        except client.ClientError as exc:
            raise TargetFailed(f"{exc.error.code}: {exc.error.message}") from None
        if not reply.ok and reply.error is not None and reply.result is None:
            raise TargetFailed(f"{reply.error.code}: {reply.error.message}")
        return reply.result

    async def send(self, req: SendText) -> AgentEvent:
        return _event(await self._call(req, req.timeout_ms / 1000))

    async def answer(self, call_id: str, result: Any, wait_s: float) -> AgentEvent:
        req = CallsResolve(request_id=client.new_request_id(), call_id=call_id, result=result,
                           timeout_ms=int(wait_s * 1000))  # fmt: skip
        return _event(await self._call(req, wait_s))

    async def pids(self, key: str) -> tuple[int, ...]:
        try:
            status = await self._call(StatusQuery(request_id=client.new_request_id()), 10.0)
        except TargetFailed:
            return ()
        rows = status.get("processes", []) if isinstance(status, dict) else []
        mine = [r for r in rows if isinstance(r, dict) and r.get("instanceKey") == key]
        return tuple(sorted(r["pid"] for r in mine if isinstance(r.get("pid"), int)))


def _event(result: Any) -> AgentEvent:
    try:
        return msgspec.convert(result, AgentEvent)
    except msgspec.ValidationError:
        raise TargetFailed("the daemon's reply is not a reply event") from None
