"""The daemon's pending deferred calls (ARCHITECTURE.md §10): index, client notice, resolution
routing.

An agent process whose tool deferred a call to the client persists it as
`instances/<swarm>/<key>/<agent>/pending-calls/<id>.json` and sends `call op=deferred_submit`.
The index here learns it from that frame, and is rebuilt from those files (a scan of every
instance's `pending-calls/`) whenever it is listed or resolved, so it survives a daemon restart.

On submit, the JSON-RPC 2.0 request `{jsonrpc, id, method, params}` goes to the client that
started the turn: a control client (`goondan send`) waiting on the turn's reply gets a
response event now, with the request in `metadata.deferred` (its text names the call and how
to answer it); a connector gets it as the same kind of response event (its `replyTo` target).

`resolve` (`goondan calls resolve`, a connector's `deferred.answer`) first checks who answers
(`call_auth.py`: an approval only from an approver, any other call only through the Connection
that received it; else E_CALL_FORBIDDEN), records the answer in the daemon's own answer book
(`call_answers.py`, outside the instance tree the agent writes; an approval is logged as
`approval_decided` with `by`/`via` set here, never taken from the answer), re-opens the
original request's correlation id so the resumed turn's reply reaches the resolving client,
and only then hands the answer to the owning agent process in the frame
`call op=deferred_resolve {id, answer}` (spawning it first if it is not running: on its
`ready` it gets every answer recorded for it, and resumes the turn; `call_delivery.py`).
Expired calls are dropped from the index (the agent fails them with E_TOOL_DEFERRED_EXPIRED).

A turn that came from a connector (a chat) and is answered by anyone else (`goondan calls`,
Studio, another connector's `/rpc`) still ends in that connector: the resumed turn's reply is
passed on to it with `metadata.resumedCall` (the call's id), which the connector uses to find
where the turn came from (`ConnectorContext.on_resumed`); the answering client gets it too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import structlog

from orchestrator.calls import auth as call_auth
from orchestrator.calls.answer_delivery import CallDelivery
from orchestrator.calls.answers import AnswerBook
from orchestrator.calls.auth import Answerer
from orchestrator.calls.deferred_remote import NO_MIRROR, CallMirror, Forward
from orchestrator.routing.broker import RequestBroker, Targets
from orchestrator.supervision.mailboxes import OpenRequest
from orchestrator.supervision.table import ProcessEntry
from orchestrator.swarm.view import CurrentSwarm
from protocol.endpoints import StateLayout, path_segment
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, Source, SourceKind, response_to
from protocol.ids import ORCHESTRATOR, Address, agent_address
from protocol.jsonrpc import (
    ANSWER_SUFFIX,
    APPROVE_METHOD,
    PENDING_SUFFIX,
    JsonRpcError,
    JsonRpcResponse,
    PendingCall,
    approval_answer,
)
from protocol.jsontypes import JsonObject
from protocol.messages import CallOp, CallPayload

DEFERRED_OPS = frozenset({CallOp.DEFERRED_SUBMIT})
RPC_WAIT_S = 120.0
PASSED_ON = frozenset({"deferred", "pendingCall", "usage"})
"""What the answering connector hears of the resumed turn's reply besides its text: the next
client-side call when the turn made another, and the token counts."""
log = structlog.get_logger("goondan.deferred")
SOURCE = Source(kind=SourceKind.ORCHESTRATOR, name=ORCHESTRATOR)


class DeferredCallError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Found:
    call: PendingCall
    path: Path


def notice_text(call: PendingCall) -> str:
    params = msgspec.json.encode(call.params).decode()
    lines = [f"[pending call {call.id}] {call.method} {params}"]
    if call.message:
        lines.append(call.message)
    if call.method == APPROVE_METHOD:
        lines.append(f"answer: goondan calls approve {call.id} | goondan calls deny {call.id}")
    else:
        lines.append(f"answer: goondan calls resolve {call.id} --result JSON | --error CODE")
    return "\n".join(lines)


def call_row(call: PendingCall, now: float) -> JsonObject:
    return {
        "id": call.id,
        "agent": call.agent,
        "instanceKey": call.instance_key,
        "tool": call.tool_name,
        "method": call.method,
        "params": call.params,
        "message": call.message,
        "createdAt": call.created_at,
        "expiresAt": call.expires_at,
        "ageSeconds": round(now - call.created_at, 3),
        "expiresInSeconds": round(call.expires_at - now, 3),
        "request": msgspec.to_builtins(call.request()),
    }


class DeferredIndex:
    def __init__(
        self,
        broker: RequestBroker,
        targets: Targets,
        layout: StateLayout,
        swarm: str,
        clock: Callable[[], float] = time.time,
        *,
        view: CurrentSwarm,
        mirror: CallMirror = NO_MIRROR,
    ) -> None:
        self.broker = broker
        self.targets = targets
        """Whether the owning agent may run here, and starting it (the supervisor)."""
        self.layout = layout
        self.swarm = swarm
        self.clock = clock
        self.calls: dict[str, Found] = {}
        self.book = AnswerBook(layout.answers_dir(swarm))
        """The answers recorded and not yet spent (call_answers.py)."""
        self.book.load()
        self.delivery = CallDelivery(broker, targets, self.book, self._pending_dir)
        self._tasks: set[asyncio.Future[None]] = set()
        self.mirror = mirror
        """Where calls are kept beyond this node (cluster mode), or nowhere (one machine)."""
        self.view = view
        """The swarm's Connections (their `approvers`), swapped by a reload."""

    # -- the index --------------------------------------------------------------------

    def _read(self, path: Path) -> PendingCall | None:
        """The call in `path` if it is one of that directory's instance: a file an agent wrote
        into its own `pending-calls/` naming another instance is not that instance's call."""
        try:
            call = msgspec.json.decode(path.read_bytes(), type=PendingCall)
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("pending_call_unreadable", path=str(path), error=str(exc))
            return None
        if path.parent != self._pending_dir(call.agent, call.instance_key):
            log.warning("pending_call_misplaced", path=str(path), call_id=call.id,
                        agent=call.agent, instanceKey=call.instance_key)  # fmt: skip
            return None
        return call

    def _pending_dir(self, agent: str, instance_key: str) -> Path:
        return self.layout.instance_paths(self.swarm, instance_key, agent).pending_calls_dir

    def _open(self, call: PendingCall) -> bool:
        """Whether `call` waits for an answer: its file is there and none is recorded."""
        return not self.book.has(agent_address(call.agent, call.instance_key), call.id)

    def _calls_in(self, directory: Path) -> list[tuple[Path, PendingCall]]:
        found = []
        for path in sorted(directory.glob("*" + PENDING_SUFFIX)) if directory.is_dir() else []:
            if path.name.endswith(ANSWER_SUFFIX):
                continue  # an earlier goondan's answer file: never read (call_answers.py)
            call = self._read(path)
            if call is not None:
                found.append((path, call))
        return found

    def scan(self) -> None:
        """Rebuild from disk; expired calls are left out (their agent fails them)."""
        root = self.layout.swarm_instances_dir(self.swarm)
        found: dict[str, Found] = {}
        now = self.clock()
        for directory in root.glob("*/*/pending-calls") if root.is_dir() else []:
            for path, call in self._calls_in(directory):
                if call.expires_at > now and self._open(call):
                    found[call.id] = Found(call, path)
        self.calls = found

    def resume_answered(self) -> list[Address]:
        """At daemon start: calls answered (recorded in the answer book) whose turn no
        process resumed, because an earlier daemon died between recording the answer and the
        agent taking it. Start those instances: on `ready` each gets its answers and resumes
        the turn."""
        started = []
        for address in self.book.instances():
            if not self.delivery.sweep(address):
                continue  # every answer of it was taken: its calls' files are gone
            if self.targets.check_target(address) is not None:
                continue  # e.g. the agent left the swarm: nothing can resume it here
            log.info("deferred_call_resuming", target=str(address))
            self.targets.ensure(address)
            started.append(address)
        return started

    def pending_for(self, address: Address) -> list[PendingCall]:
        """The unanswered, unexpired calls of one instance, from its own directory: a send
        asks this for its target, and must not scan every instance the swarm ever had."""
        now = self.clock()
        directory = self._pending_dir(address.name, address.instance_key)
        return [
            call
            for _, call in self._calls_in(directory)
            if call.expires_at > now and self._open(call)
        ]

    async def list(self) -> list[JsonObject]:
        """The pending calls, oldest first: this node's, and in cluster mode every node's."""
        self.scan()
        calls = {f.call.id: f.call for f in self.calls.values()}
        now = self.clock()
        for call in await self.mirror.swarm_calls():
            if call.expires_at > now:
                calls.setdefault(call.id, call)
        return [call_row(c, now) for c in sorted(calls.values(), key=lambda c: c.created_at)]

    # -- from agent processes ---------------------------------------------------------

    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None:
        try:
            call = msgspec.convert(payload.args.get("call"), PendingCall)
            event = msgspec.convert(call.event, AgentEvent)
        except msgspec.ValidationError as exc:
            log.warning("deferred_submit_invalid", sender=entry.id_text, error=str(exc))
            return
        sender = entry.address
        if (call.agent, call.instance_key) != (sender.name, sender.instance_key):
            # a process may only submit its own calls: another instance's would put a request
            # of that instance in front of a client, and its answer into that instance's turn
            log.warning("deferred_submit_foreign", sender=entry.id_text, call_id=call.id,
                        agent=call.agent, instanceKey=call.instance_key)  # fmt: skip
            return
        path = self._pending_dir(call.agent, call.instance_key) / (
            path_segment(call.id) + PENDING_SUFFIX
        )
        self.calls[call.id] = Found(call, path)

        def announce() -> None:
            log.info("deferred_call_pending", call_id=call.id, method=call.method,
                     agent=call.agent, instanceKey=call.instance_key)  # fmt: skip
            self._notify_client(event, call)

        self.mirror.pending(call, announce)

    def on_death(self, address: Address, event: AgentEvent) -> bool:
        """The process of `address` died running `event`. If that turn had suspended on a
        deferred call (saved to disk before it is submitted), the turn is not lost: the next
        process (the crashed one is respawned) resumes it. The client then gets the call's
        request if the submit was lost or is still on its way; once answered, the resolving
        client keeps waiting for the resumed turn's reply. True when so (no E_AGENT_CRASHED)."""
        self.delivery.sweep(address)
        suspended = False
        for path, call in self._calls_in(self._pending_dir(address.name, address.instance_key)):
            if call.event.get("id") != event.id:
                continue
            suspended = True
            if call.id not in self.calls and self._open(call):
                self.calls[call.id] = Found(call, path)
                log.info("deferred_call_recovered", call_id=call.id, method=call.method)
                self._notify_client(event, call)
        return suspended

    def _notify_client(self, event: AgentEvent, call: PendingCall) -> None:
        """The JSON-RPC request reaches whoever waits on the turn's reply."""
        if event.reply_to is None:
            return
        notice = response_to(
            event,
            source=SOURCE,
            text=notice_text(call),
            metadata={"deferred": msgspec.to_builtins(call.request()), "pendingCall": call.id},
        )
        # a control client's wait ends with the notice; a connector gets it as a response
        # and its request stays open for the resumed turn's reply
        self.broker.respond_interim(notice)

    # -- from clients -----------------------------------------------------------------

    def on_answer_event(self, entry: ProcessEntry, event: AgentEvent, to: str) -> None:
        """`deferred.answer` from a connector process: resolve, answer its event with the
        reply. Who answers is that process's Connection (the router says which), never the
        event's own `source`."""
        if event.reply_to is not None:
            self.broker.open_request(OpenRequest.of(event, event.reply_to, None))
        connection = self.view.view.connections.get(entry.address)
        approvers = connection.approvers if connection is not None else frozenset()
        who = call_auth.from_connector(entry.address, event, to, approvers)
        task = asyncio.ensure_future(self._answer_for(event, who))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_for(self, event: AgentEvent, who: Answerer) -> None:
        text, error, meta = "", None, {}
        try:
            answer = msgspec.convert(event.metadata.get("rpc"), JsonRpcResponse)
            streams = event.reply_to is not None and event.reply_to.stream
            reply = await self.resolve(answer.id, answer, RPC_WAIT_S, who=who, wait=True,
                                       stream=streams)  # fmt: skip
        except msgspec.ValidationError as exc:
            message = f"not a JSON-RPC 2.0 response {{jsonrpc, id, result | error}}: {exc}"
            error = ErrorInfo(code=ErrorCode.E_CALL_INVALID_ANSWER, message=message)
        except DeferredCallError as exc:
            error = ErrorInfo(code=exc.code, message=exc.message)
        else:
            if isinstance(reply, AgentEvent):  # the resumed turn's reply, or its next call
                text, error = reply.input, reply.error
                meta = {k: v for k, v in reply.metadata.items() if k in PASSED_ON}
            else:
                meta = {"accepted": True}
        if event.reply_to is not None:
            self.broker.respond(
                response_to(event, source=SOURCE, text=text, error=error, metadata=meta)
            )

    async def decide(
        self,
        call_id: str,
        approve: bool,
        message: str | None,
        wait_s: float,
        *,
        who: Answerer,
        here: bool = False,
    ) -> Any:
        """`goondan calls approve|deny` (and Studio's buttons, `via` studio): a person's
        decision on a `goondan.approve` call. `here`: forwarded by another node (never
        forwarded again)."""
        located = await self._locate(call_id, forwardable=not here)
        call = located.call if isinstance(located, Found) else located
        if call.method != APPROVE_METHOD:
            raise DeferredCallError(
                ErrorCode.E_CALL_NOT_APPROVAL,
                f"call {call_id} is a {call.method} call, not an approval; answer it with "
                "`goondan calls resolve ID --result JSON | --error CODE`",
            )
        answer = approval_answer(call_id, approved=approve, by=who.by, via=who.via,
                                 at=self.clock(), message=message)  # fmt: skip
        return await self._answer(located, answer, wait_s, who=who, here=here)

    async def resolve(
        self,
        call_id: str,
        answer: JsonRpcResponse,
        wait_s: float,
        *,
        who: Answerer,
        wait: bool = False,
        here: bool = False,
        stream: bool = False,
    ) -> Any:
        """Check who answers, record the answer, route it to the owning process; wait for the
        resumed turn's reply when the control client started it or `wait` (else return at
        once). An answer to an approval becomes a decision record (who, how, when: goondan's
        own, not the answer's). In cluster mode a call another node runs is answered there
        (`here`: this is that node, asked by another that checked and recorded who answers)."""
        located = await self._locate(call_id, forwardable=not here)
        call = located.call if isinstance(located, Found) else located
        if call.method == APPROVE_METHOD and not here:
            answer = call_auth.decision(call, answer, who, self.clock())
        return await self._answer(located, answer, wait_s, who=who, wait=wait, here=here,
                                  stream=stream)  # fmt: skip

    async def _answer(
        self,
        located: Found | PendingCall,
        answer: JsonRpcResponse,
        wait_s: float,
        *,
        who: Answerer,
        wait: bool = False,
        here: bool = False,
        stream: bool = False,
    ) -> Any:
        call = located.call if isinstance(located, Found) else located
        refused = None if here else call_auth.refusal(call, who)
        if refused is not None:
            log.warning("deferred_answer_forbidden", call_id=call.id, method=call.method,
                        via=who.via, by=who.by, reason=refused)  # fmt: skip
            raise DeferredCallError(ErrorCode.E_CALL_FORBIDDEN, refused)
        if not isinstance(located, Found):
            return await self._forward(call, wait_s, who, answer=answer, wait=wait)
        address = agent_address(call.agent, call.instance_key)
        problem = self.targets.check_target(address)
        if problem is not None:  # e.g. the agent left the swarm: keep the call for later
            raise DeferredCallError(ErrorCode(problem.code), problem.message)
        self.delivery.sweep(address)
        self.book.record(call, answer, self.clock())  # before the agent can hear of it
        self.calls.pop(call.id, None)
        self.mirror.answered(call)
        waiter = self.delivery.reopen(call, wait, who.via)
        self.delivery.route(address, call.id, stream)
        if waiter is None:
            return {"resolved": call.id, "agent": call.agent, "instanceKey": call.instance_key}
        try:
            async with asyncio.timeout(wait_s):
                # shielded: a reply that comes after the wait still reaches the turn's origin
                return await asyncio.shield(waiter)
        except TimeoutError:
            raise DeferredCallError(
                ErrorCode.E_AGENT_TIMEOUT,
                f"call {call.id} was resolved, but the resumed turn did not answer within "
                f"{wait_s} s",
            ) from None

    async def handle(self, forward: Forward) -> Any:
        """An answer another node forwarded, checked and recorded as who gave it there: this
        node runs the call's instance."""
        who = Answerer(via=forward.via, by=forward.by)
        if forward.answer is not None:
            return await self.resolve(forward.call_id, forward.answer, forward.wait_s,
                                      who=who, wait=forward.wait, here=True)  # fmt: skip
        return await self.decide(forward.call_id, bool(forward.approve), forward.message,
                                 forward.wait_s, who=who, here=True)  # fmt: skip

    async def _locate(self, call_id: str, *, forwardable: bool) -> Found | PendingCall:
        """The call in this node's files, or (cluster mode) the call another node runs."""
        if self._local(call_id) is None:
            elsewhere = await self.mirror.locate(call_id)
            if elsewhere is not None:
                if forwardable:
                    return elsewhere
                raise DeferredCallError(
                    ErrorCode.E_CLUSTER_UNAVAILABLE,
                    f"call {call_id}'s instance moved to another node meanwhile; try again",
                )
        return self._find(call_id)

    async def _forward(self, call: PendingCall, wait_s: float, who: Answerer, **asked: Any) -> Any:
        forward = Forward(call_id=call.id, agent=call.agent, instance_key=call.instance_key,
                          wait_s=wait_s, via=who.via, by=who.by, **asked)  # fmt: skip
        return await self.mirror.forward(call, forward)

    def _local(self, call_id: str) -> Found | None:
        found = self.calls.get(call_id)
        if found is None or found.call.expires_at <= self.clock():
            self.scan()
            found = self.calls.get(call_id)
        return found

    def _find(self, call_id: str) -> Found:
        found = self._local(call_id)
        if found is None:
            raise DeferredCallError(
                ErrorCode.E_CALL_NOT_FOUND,
                f"no pending call {call_id!r} (already answered, expired, or never made); "
                "see `goondan calls list`",
            )
        return found

    def on_ready(self, address: Address) -> None:
        self.delivery.on_ready(address)


def answer_of(
    call_id: str, result: Any, code: int | None, message: str | None, data: Any
) -> JsonRpcResponse:
    if code is None:
        return JsonRpcResponse(id=call_id, result=result)
    error = JsonRpcError(code=code, message=message or f"client error {code}", data=data)
    return JsonRpcResponse(id=call_id, error=error)
