"""Studio's side of the control socket: the running daemon of one swarm, found again at each
request (a daemon restarted meanwhile is picked up), asked in a worker thread (the CLI's
blocking client, `orchestrator/control/client.py`) so the web server's loop never waits on it."""

from __future__ import annotations

import asyncio
import os
import pwd

import msgspec

from orchestrator.control.client import ClientError, call, new_request_id
from orchestrator.control.rundir import read_active
from protocol.control import (
    CallsDecide,
    CallsList,
    CallsResolve,
    ControlReply,
    ControlRequest,
    OrchestratorInfo,
    ProcessStop,
    Restart,
    StatusQuery,
    StatusResult,
)
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.pids import pid_alive


class DaemonLink:
    def __init__(self, layout: StateLayout, swarm: str) -> None:
        self.layout = layout
        self.swarm = swarm
        self.user = _os_user()
        """Who started Studio: the person a decision made on its page is recorded as."""

    def info(self) -> OrchestratorInfo | None:
        info = read_active(self.layout.run_paths(self.swarm).active_json)
        return info if info is not None and pid_alive(info.pid) else None

    async def ask(self, req: ControlRequest, limit: float = 10.0) -> ControlReply:
        """The daemon's reply; a coded error reply when no daemon runs or it does not answer."""
        info = self.info()
        if info is None:
            error = ErrorInfo(
                code=ErrorCode.E_DAEMON_NOT_RUNNING,
                message=f"no goondan daemon runs swarm {self.swarm!r}",
                suggestion="start it with `goondan run`",
            )
            return ControlReply(request_id="", ok=False, error=error)
        try:
            return await asyncio.to_thread(call, info, req, limit)
        except ClientError as exc:
            error = ErrorInfo(code=exc.error.code, message=exc.error.message,
                              suggestion=exc.error.suggestion)  # fmt: skip
            return ControlReply(request_id=req.request_id, ok=False, error=error)

    async def status(self) -> StatusResult | None:
        reply = await self.ask(StatusQuery(request_id=new_request_id()))
        return msgspec.convert(reply.result, StatusResult) if reply.ok else None

    async def restart(self, agent: str, instance_key: str | None) -> ControlReply:
        req = Restart(request_id=new_request_id(), agent=agent, instance_key=instance_key)
        return await self.ask(req, limit=60.0)

    async def stop_process(self, agent: str, instance_key: str) -> ControlReply:
        req = ProcessStop(request_id=new_request_id(), agent=agent, instance_key=instance_key)
        return await self.ask(req, limit=60.0)

    async def calls(self) -> ControlReply:
        return await self.ask(CallsList(request_id=new_request_id()))

    async def resolve(self, req: CallsResolve) -> ControlReply:
        return await self.ask(req, limit=req.timeout_ms / 1000 + 5)

    async def decide(self, call_id: str, approve: bool, message: str | None) -> ControlReply:
        """Approve or deny a `goondan.approve` call: the request of `goondan calls
        approve|deny`, recorded as decided via Studio by the OS user who started it (the
        page's visitor proved only that it holds the token; nothing it sends names anyone)."""
        req = CallsDecide(request_id=new_request_id(), call_id=call_id, approve=approve,
                          message=message, by=self.user, via="studio",
                          timeout_ms=30_000)  # fmt: skip
        return await self.ask(req, limit=req.timeout_ms / 1000 + 5)


def _os_user() -> str:
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # no passwd entry (a container's uid): the number is still someone
        return f"uid {uid}"
