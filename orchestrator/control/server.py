"""The control ROUTER (`control.sock`): one small handler per request type (ARCHITECTURE.md §9).

Every request gets exactly one `ControlReply` with the same `request_id`; a request that
cannot be decoded gets a coded E_CONTROL_BAD_REQUEST reply, and a handler that fails gets
its error back as data. Handlers run as tasks so a waiting `send` never blocks `status`.
A `send` may get interim replies first: notices (why it waits) and, when it asked for a
stream, the turn's deltas (orchestrator/ingress/streams.py), which its client acknowledges with the
one request that is never answered, `StreamAck`.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, assert_never

import msgspec
import structlog
import zmq
import zmq.asyncio

from orchestrator.calls import auth as call_auth
from orchestrator.calls.deferred import DeferredCallError, DeferredIndex, answer_of
from orchestrator.calls.permits import Permits
from orchestrator.control.fence import Fence
from orchestrator.control.scope import ControlFailed, SwarmScope
from orchestrator.ingress import send as sending
from orchestrator.ingress.port import Ingress
from orchestrator.ingress.streams import ClientStream
from orchestrator.routing.peers import PeerWatch, peer_pid, peer_uid
from orchestrator.routing.router import Router
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.swarm.view import CurrentSwarm
from protocol.codec import decode_control_request, encode, to_builtins
from protocol.control import (
    WAITING,
    Attach,
    CallsDecide,
    CallsList,
    CallsResolve,
    ClusterDrain,
    ClusterStatusQuery,
    ControlReply,
    ControlRequest,
    InstanceDelete,
    InstanceHistory,
    InstanceList,
    LogsQuery,
    OrchestratorInfo,
    Ping,
    ProcessInfo,
    ProcessStop,
    Reload,
    Restart,
    SendText,
    StatusQuery,
    StatusResult,
    Stop,
    StopReport,
    StreamAck,
)
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent
from protocol.ids import Address, ProcessKind
from protocol.jsontypes import JsonObject
from protocol.messages import ShutdownReason
from protocol.stream import StreamDelta

log = structlog.get_logger("goondan.control")
CONTROL_MAX_FRAME_BYTES = 4 << 20
"""A control request is small; a bigger frame is refused before it is read (`send` text and
`calls resolve` results included)."""


ReloadFn = Callable[[str], Awaitable[tuple[JsonObject, ErrorInfo | None]]]
"""trigger -> (result, error when the new bundle was rejected)."""


@dataclass(slots=True)
class ControlContext:
    router: Router
    supervisor: Supervisor
    info: OrchestratorInfo
    layout: StateLayout
    swarm: CurrentSwarm
    """The entry agent and default instance key of `send` (a reload swaps them)."""
    request_stop: Callable[[], None]
    acceptor: Ingress
    """Where a `send` is accepted (orchestrator/ingress/port.py: journaled, direct or the
    cluster's stream)."""
    reload: ReloadFn
    """Re-read the bundle, restart what changed (`orchestrator.reload.apply.Reloader.answer`)."""
    deferred: DeferredIndex
    """The pending deferred calls of `goondan calls list|resolve`."""
    permits: Permits
    """Today's usage against budgets and the Models' rate limits, for `goondan status`."""
    stopped: asyncio.Future[StopReport]
    """Set by the daemon when its drain is over (what `goondan stop` waits for)."""
    scope: SwarmScope
    """How far `status`, `instance`, `logs` and `cluster` requests see: this machine, or every
    node of the swarm's cluster (orchestrator/control/scope.py)."""


async def _cluster(
    ctx: ControlContext, req: ClusterStatusQuery | ClusterDrain | InstanceHistory | LogsQuery
) -> JsonObject:
    if isinstance(req, ClusterDrain):
        return await ctx.scope.drain(req.node)
    if isinstance(req, InstanceHistory):
        return await ctx.scope.conversation(req)
    if isinstance(req, LogsQuery):
        return await ctx.scope.logs(req)
    return await ctx.scope.status()


async def _status(ctx: ControlContext) -> StatusResult:
    pending: Counter[str] = Counter()
    pending.update(await ctx.acceptor.pending_targets())
    now = ctx.supervisor.clock()
    waiting = _waiting_calls(ctx.deferred)
    own = [_waiting(e.info(now, pending[str(e.address)]), waiting) for e in ctx.supervisor.table]
    rows, unanswered = await ctx.scope.processes(own)
    usage, models = ctx.permits.budgets.rows(), ctx.permits.limits.rows()
    return StatusResult(orchestrator=ctx.info, processes=rows, usage=usage, models=models,
                        unanswered=unanswered)  # fmt: skip


def _waiting_calls(deferred: DeferredIndex) -> dict[tuple[str, str], list[str]]:
    """(agent, instance key) -> the ids of its pending client-side calls, oldest first."""
    calls: dict[tuple[str, str], list[str]] = {}
    for found in deferred.calls.values():
        call = found.call
        calls.setdefault((call.agent, call.instance_key), []).append(call.id)
    return calls


def _waiting(row: ProcessInfo, calls: dict[tuple[str, str], list[str]]) -> ProcessInfo:
    """A turn suspended on a client-side call (an approval) is `waiting`, not `processing`:
    its process does nothing until the answer (and counts as idle, ARCHITECTURE.md §10)."""
    ids = calls.get((row.name, row.instance_key))
    if not ids or row.status != str(ProcessStatus.PROCESSING):
        return row
    return msgspec.structs.replace(row, status=WAITING, calls=ids)


async def _instance_request(ctx: ControlContext, req: InstanceList | InstanceDelete) -> Any:
    if isinstance(req, InstanceDelete):
        return await ctx.scope.delete_instance(req.instance_key, req.agent)
    return {"instances": await ctx.scope.instances()}


async def _stop_process(ctx: ControlContext, req: ProcessStop) -> JsonObject:
    """Stop one live agent process (Studio's stop button; its next event starts it again)."""
    address = Address(kind=ProcessKind.AGENT, name=req.agent, instance_key=req.instance_key)
    entry = ctx.supervisor.table.get(address)
    if entry is None or not entry.live:
        missing = f"no live process of agent {req.agent!r} instance {req.instance_key!r}"
        raise ControlFailed(ErrorCode.E_INSTANCE_NOT_FOUND, missing)
    killed = await ctx.supervisor.stop(entry, ShutdownReason.RESTART)
    return {"stopped": [str(entry.address)], "killed": killed}


CallsRequest = CallsList | CallsResolve | CallsDecide


async def _calls(req: CallsRequest, ctx: ControlContext, uid: int | None) -> Any:
    """`goondan calls list|resolve|approve|deny`: the daemon's pending deferred calls
    (ARCHITECTURE.md §10). An answer is recorded as the OS user of the peer (`uid`), never as
    the request says."""
    index = ctx.deferred
    if isinstance(req, CallsList):
        return {"calls": await index.list()}
    try:
        if isinstance(req, CallsDecide):
            who = call_auth.operator(req.via, uid)
            return await index.decide(req.call_id, req.approve, req.message,
                                      req.timeout_ms / 1000, who=who)  # fmt: skip
        answer = answer_of(
            req.call_id, req.result, req.error_code, req.error_message, req.error_data
        )
        who = call_auth.operator("cli", uid)
        return await index.resolve(req.call_id, answer, req.timeout_ms / 1000, who=who)
    except DeferredCallError as exc:
        raise ControlFailed(exc.code, exc.message) from None


async def _reload_or_later(req: Reload | CallsRequest, ctx: ControlContext, uid: int | None) -> Any:
    if not isinstance(req, Reload):
        return await _calls(req, ctx, uid)
    result, error = await ctx.reload("control")
    if error is not None:
        raise ControlFailed(ErrorCode(error.code), error.message)
    return result


async def _send(
    ctx: ControlContext,
    req: SendText | Attach | StreamAck,
    notify: sending.Notify,
    stream: ClientStream | None,
    accepted: sending.Notify = sending.quiet,
) -> sending.Answer:
    if isinstance(req, StreamAck):  # the server takes these itself: one here is misplaced
        raise ControlFailed(ErrorCode.E_CONTROL_BAD_REQUEST, "stream_ack is never answered")
    try:
        return await sending.answer(ctx, req, notify, stream, accepted)
    except sending.SendFailed as exc:
        raise ControlFailed(exc.code, exc.message) from None


async def _say_who_is_busy(ctx: ControlContext, agent: str | None, notify: sending.Notify) -> None:
    """A stop waits for turns in progress: say which, and for how long at most."""
    busy = [
        str(e.process_id)
        for e in ctx.supervisor.table
        if e.status is ProcessStatus.PROCESSING and agent in (None, e.address.name)
    ]
    if busy:
        grace = ctx.supervisor.settings.grace_period
        await notify(f"waiting up to {grace:g} s for the turn of {', '.join(busy)} to end, then "
                     "SIGKILL")  # fmt: skip


async def _restart(ctx: ControlContext, req: Restart, notify: sending.Notify) -> JsonObject:
    """`goondan restart` (Studio's restart button: one instance)."""
    if req.agent is not None and req.agent not in ctx.swarm.view.members:
        raise ControlFailed(ErrorCode.E_AGENT_NOT_IN_SWARM, f"no agent {req.agent!r}")
    await _say_who_is_busy(ctx, req.agent, notify)
    restarted = await ctx.supervisor.restart(req.agent, fresh=req.fresh,
                                             instance_key=req.instance_key)  # fmt: skip
    return {"restarted": restarted, "graceSeconds": ctx.supervisor.settings.grace_period}


async def _stop(ctx: ControlContext, req: Stop, notify: sending.Notify) -> Any:
    ctx.request_stop()
    if req.wait:
        await _say_who_is_busy(ctx, None, notify)
        return await asyncio.shield(ctx.stopped)
    return {"stopping": True, "pid": ctx.info.pid}


async def handle(
    req: ControlRequest,
    ctx: ControlContext,
    notify: sending.Notify = sending.quiet,
    stream: ClientStream | None = None,
    uid: int | None = None,
    accepted: sending.Notify = sending.quiet,
) -> Any:
    """The result of one request (raise ControlFailed for a coded error); `uid`: the peer's;
    `accepted` hears the event id of a send that asked to `announce` it."""
    match req:
        case Ping():
            return ctx.info
        case SendText() | Attach() | StreamAck():
            return await _send(ctx, req, notify, stream, accepted)
        case StatusQuery():
            return await _status(ctx)
        case Restart():
            return await _restart(ctx, req, notify)
        case ProcessStop():
            return await _stop_process(ctx, req)
        case Stop():
            return await _stop(ctx, req, notify)
        case InstanceList() | InstanceDelete():
            return await _instance_request(ctx, req)
        case Reload() | CallsList() | CallsResolve() | CallsDecide():
            return await _reload_or_later(req, ctx, uid)
        case ClusterStatusQuery() | ClusterDrain() | InstanceHistory() | LogsQuery():
            return await _cluster(ctx, req)
        case _:
            assert_never(req)


class ControlServer:
    """Serves the operator: whoever holds the control token, unless the kernel says the caller
    runs under this daemon (an agent, a tool it started, an orphan of one) or is another user;
    `orchestrator/control/fence.py` has the rules. Agents may never drive the daemon (approve
    another instance's pending call, stop the daemon), token or not, since same-user processes
    could read the token file."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        endpoint: str,
        control: ControlContext,
        token: str,
        agents_cgroup: str | None = None,
    ) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, CONTROL_MAX_FRAME_BYTES)
        self.sock.bind(endpoint)
        self.control = control
        self.fence = Fence(token, os.getpid(), os.geteuid(), agents_cgroup)
        self._tasks: set[asyncio.Task[None]] = set()
        self._streams: dict[tuple[bytes, str], ClientStream] = {}
        """Streaming sends in progress, by (client's routing id, request id)."""
        self._served: set[int] = set()
        self.peers = PeerWatch(self.sock, "control", CONTROL_MAX_FRAME_BYTES, self._forget)
        self.dropped = 0
        """Frames that were not a control request (too few frames, undecodable): counted."""

    def _forget(self, pid: int) -> bool:
        """Whether a request of `pid` was served (asked once, when its connection closes)."""
        served = pid in self._served
        self._served.discard(pid)
        return served

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.peers.run())
            await self._serve_forever()

    async def _serve_forever(self) -> None:
        while True:
            frames = await self.sock.recv_multipart(copy=False)
            if len(frames) < 2:
                self._drop(f"{len(frames)} frame(s), want an envelope and a request")
                continue
            pid = peer_pid(frames[-1])
            if pid is not None:
                self._served.add(pid)
            envelope = [f.bytes for f in frames[:-1]]
            uid = peer_uid(frames[-1])
            task = asyncio.ensure_future(self._serve(envelope, frames[-1].bytes, pid, uid))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def finish(self, limit: float) -> None:
        """Let the requests in flight send their replies (a stop's report, the senders of
        kept events) before the socket closes; what still waits after `limit` s is cut."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=limit)

    async def _serve(
        self, envelope: list[bytes], data: bytes, pid: int | None, uid: int | None = None
    ) -> None:
        try:
            req = decode_control_request(data)
        except ProtocolError as exc:
            self._drop(exc.message)
            error = ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST, message=exc.message)
            await self._reply(envelope, ControlReply(request_id="", ok=False, error=error))
            return
        refused = self.fence.refusal(req.token, pid, uid)
        if refused is not None:
            log.warning("control_forbidden", pid=pid, uid=uid, type=type(req).__name__,
                        reason=refused.message)  # fmt: skip
            await self._reply(envelope, ControlReply(request_id=req.request_id, ok=False,
                                                     error=refused))  # fmt: skip
            return
        if isinstance(req, StreamAck):
            self._ack(envelope, req)
            return
        stream = self._open_stream(envelope, req)
        try:
            reply = await self._answer(envelope, req, stream, uid)
        finally:
            if stream is not None:  # the deltas held for a slow client go before the reply
                stream.finish()
                self._streams.pop((envelope[0], req.request_id), None)
        await self._reply(envelope, reply)

    async def _answer(
        self,
        envelope: list[bytes],
        req: ControlRequest,
        stream: ClientStream | None,
        uid: int | None = None,
    ) -> ControlReply:
        """The final reply to `req`: its result, or its error as data."""
        try:
            notify = partial(self._notice, envelope, req)
            accepted = partial(self._accepted, envelope, req)
            result = await handle(req, self.control, notify, stream, uid, accepted)
        except ControlFailed as exc:
            return ControlReply(request_id=req.request_id, ok=False, error=exc.error)
        except Exception as exc:  # a bug in a handler: the client still gets a coded reply
            log.exception("control_handler_failed", type=type(req).__name__)
            error = ErrorInfo(
                code=ErrorCode.E_CONTROL_BAD_REQUEST,
                message=f"the daemon failed to handle {type(req).__name__}: {exc!r}",
                suggestion="see orchestrator.log",
            )
            return ControlReply(request_id=req.request_id, ok=False, error=error)
        if isinstance(result, AgentEvent) and result.error is not None:
            return ControlReply(request_id=req.request_id, ok=False, result=to_builtins(result),
                                error=result.error)  # fmt: skip
        return ControlReply(request_id=req.request_id, ok=True, result=to_builtins(result))

    def _open_stream(self, envelope: list[bytes], req: ControlRequest) -> ClientStream | None:
        if not isinstance(req, SendText) or not req.stream:
            return None

        def emit(delta: StreamDelta) -> None:
            self._send_now(envelope, ControlReply(request_id=req.request_id, ok=True,
                                                  delta=delta))  # fmt: skip

        stream = self._streams[(envelope[0], req.request_id)] = ClientStream(emit)
        return stream

    def _ack(self, envelope: list[bytes], ack: StreamAck) -> None:
        """Only the client that sent the streaming request can acknowledge its deltas."""
        stream = self._streams.get((envelope[0], ack.request_id))
        if stream is not None:
            stream.ack(ack.received)

    def _drop(self, reason: str) -> None:
        """Log the first ten drops, then every thousandth: garbage must not flood the log."""
        self.dropped += 1
        if self.dropped <= 10 or self.dropped % 1000 == 0:
            log.warning("control_bad_request", reason=reason, dropped=self.dropped)

    async def _notice(self, envelope: list[bytes], req: ControlRequest, text: str) -> None:
        interim = ControlReply(request_id=req.request_id, ok=True, notice=text)
        await self._reply(envelope, interim)

    async def _accepted(self, envelope: list[bytes], req: ControlRequest, event_id: str) -> None:
        interim = ControlReply(request_id=req.request_id, ok=True, accepted=event_id)
        await self._reply(envelope, interim)

    def _send_now(self, envelope: list[bytes], reply: ControlReply) -> None:
        """An interim reply without awaiting (from the router's frame handler): a ROUTER send
        never blocks; a client that is gone simply does not get it."""
        sent = asyncio.ensure_future(self.sock.send_multipart([*envelope, encode(reply)]))
        if sent.done():
            if sent.exception() is not None:
                log.info("control_client_gone", reason=str(sent.exception()))
        else:  # a send queued behind another: its outcome is read when it completes
            sent.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _reply(self, envelope: list[bytes], reply: ControlReply) -> None:
        try:
            await self.sock.send_multipart([*envelope, encode(reply)])
        except zmq.ZMQError as exc:
            log.info("control_client_gone", reason=str(exc))

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.peers.close()
        self.sock.close(linger=0)
