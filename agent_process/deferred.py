"""Deferred (client-side) tool calls in the agent process (ARCHITECTURE.md §10).

A handler raises `CallDeferred(method, params, message)` (or an export declared
`deferred: {method}` has no handler). `DeferredCalls.hook` (installed with
`AgentRuntime.set_deferred_hook`) then SUSPENDS the turn without blocking the process:

- the pending call is persisted as `pending-calls/<id>.json` (`protocol.jsonrpc.PendingCall`:
  id = tool call id, method, params, message, agent, instanceKey, the originating event with
  its `replyTo`, createdAt, expiresAt = now + TTL);
- a `call` frame `op=deferred_submit` tells the orchestrator, which hands the JSON-RPC 2.0
  request `{jsonrpc, id, method, params}` to the client that started the turn;
- the turn's coroutine awaits a future keyed by the tool call id. The child's loop keeps
  serving heartbeats and frames; its FIFO queue holds further events for this instance until
  the turn resumes.

The orchestrator records the client's answer where it keeps its own state and sends it in
`call op=deferred_resolve {id, answer}` (a `JsonRpcResponse`); `on_answer` completes the
future. An answer is never read from a file: `pending-calls/` is this process's to write (and
its tools'), so a file there could be an answer the agent gave itself; one found
(`<id>.answer.json`, where an earlier goondan kept answers) is ignored and logged.
`result` becomes an ok tool result (checked against the export's `resultSchema`:
`E_TOOL_INVALID_RESULT`), `error` a coded tool error the model can reason about (-32010
PermissionRequired, -32001 PermissionDenied, -32002 UserCanceled, any other code passed on
with its message and data). A timer fails the call with `E_TOOL_DEFERRED_EXPIRED` at
`expiresAt`.

The files survive the process: a later process of the instance finds them at start
(`DeferredCalls.pending`), resumes the turn (`run_turn(event, resumed)`) before any other
event, and fails expired calls at once; the answers recorded meanwhile come from the
orchestrator when the process is ready. TTL: the export's `deferred.ttlSeconds`, else the
Swarm's `policy.lifecycle.deferredTtlSeconds` (default 3600 s).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jsonschema
import msgspec
import structlog

from agent_process import approvals
from agent_process.middleware_contexts import ToolCallMwContext
from agent_process.results import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    DeferredRequest,
    ResultStatus,
    ToolResult,
    error_result,
    ok_result,
    truncate_message,
)
from agent_process.toolcall import DeferredHook
from agent_process.turn import Resumed
from bundles.kinds import ApprovalSpec, Kind
from bundles.model import Bundle
from protocol.conversation import ToolCall
from protocol.durable import write_atomic
from protocol.endpoints import path_segment
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent
from protocol.ids import ORCHESTRATOR
from protocol.jsonrpc import (
    ANSWER_SUFFIX,
    APPROVE_METHOD,
    PENDING_SUFFIX,
    DeferredErrorCode,
    JsonRpcError,
    JsonRpcResponse,
    PendingCall,
)
from protocol.messages import Call, CallOp, CallPayload

DEFAULT_TTL_SECONDS = 3600.0
T = TypeVar("T")
log = structlog.get_logger("goondan.deferred")

_CLIENT_ERRORS: dict[int, tuple[ErrorCode, str, str]] = {
    DeferredErrorCode.PERMISSION_REQUIRED: (
        ErrorCode.E_TOOL_PERMISSION_REQUIRED,
        "PermissionRequired",
        "the user has not granted the permission yet; explain why it is needed and ask",
    ),
    DeferredErrorCode.PERMISSION_DENIED: (
        ErrorCode.E_TOOL_PERMISSION_DENIED,
        "PermissionDenied",
        "the user denied the permission; do not retry, continue without it",
    ),
    DeferredErrorCode.USER_CANCELED: (
        ErrorCode.E_TOOL_USER_CANCELED,
        "UserCanceled",
        "the user canceled; ask before trying again",
    ),
}


@dataclass(frozen=True, slots=True)
class ToolDeferral:
    ttl_seconds: float | None = None
    result_schema: dict[str, Any] | None = None


@dataclass(slots=True)
class DeferredPolicy:
    """TTL and result schema per model-facing tool name (`<Tool>__<export>`)."""

    default_ttl: float = DEFAULT_TTL_SECONDS
    tools: dict[str, ToolDeferral] = field(default_factory=dict)

    def ttl(self, tool: str) -> float:
        spec = self.tools.get(tool)
        return spec.ttl_seconds if spec and spec.ttl_seconds is not None else self.default_ttl

    def schema(self, tool: str) -> dict[str, Any] | None:
        spec = self.tools.get(tool)
        return spec.result_schema if spec else None


def policy_from_bundle(bundle: Bundle, swarm: str) -> DeferredPolicy:
    policy = DeferredPolicy()
    for res in bundle.of_kind(Kind.SWARM):
        if res.name == swarm:
            policy.default_ttl = res.spec.policy.lifecycle.deferred_ttl_seconds
    for res in bundle.of_kind(Kind.TOOL):
        for export in getattr(res.spec, "exports", None) or []:
            ttl = export.deferred.ttl_seconds if export.deferred is not None else None
            if isinstance(export.approval, ApprovalSpec) and ttl is None:
                ttl = export.approval.ttl_seconds
            if ttl is not None or export.result_schema is not None:
                spec = ToolDeferral(ttl, export.result_schema)
                policy.tools[f"{res.name}__{export.name}"] = spec
    return policy


class PendingStore:
    """`pending-calls/`: one `<id>.json` per pending call."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def _path(self, call_id: str, suffix: str = PENDING_SUFFIX) -> Path:
        return self.dir / (path_segment(call_id) + suffix)

    def save(self, call: PendingCall) -> None:
        write_atomic(self._path(call.id), msgspec.json.encode(call))

    def load(self) -> list[PendingCall]:
        calls = []
        for path in sorted(self.dir.glob("*" + PENDING_SUFFIX)) if self.dir.is_dir() else []:
            if path.name.endswith(ANSWER_SUFFIX):
                log.warning("deferred_answer_file_ignored", path=str(path),
                            code=ErrorCode.E_CALL_FORBIDDEN.value,
                            reason="answers come only from the orchestrator")  # fmt: skip
                continue
            try:
                calls.append(msgspec.json.decode(path.read_bytes(), type=PendingCall))
            except (OSError, msgspec.DecodeError) as exc:
                log.warning("pending_call_unreadable", path=str(path), error=str(exc))
        return sorted(calls, key=lambda c: c.created_at)

    def remove(self, call_id: str) -> None:
        self._path(call_id).unlink(missing_ok=True)
        self._path(call_id, ANSWER_SUFFIX).unlink(missing_ok=True)


def client_error_result(error: JsonRpcError, method: str) -> ToolResult:
    """A JSON-RPC error from the client -> a coded tool error the model can reason about."""
    known = _CLIENT_ERRORS.get(error.code)
    data = (
        f" (data: {json.dumps(error.data, ensure_ascii=False)})" if error.data is not None else ""
    )
    message = f"the client answered {method} with error {error.code}: {error.message}{data}"
    if known is None:
        code, name = ErrorCode.E_TOOL_CLIENT_ERROR, f"JsonRpcError{error.code}"
        suggestion = "read the client's message; the call did not succeed"
    else:
        code, name, suggestion = known
    info = ErrorInfo(
        code=code,
        name=name,
        message=truncate_message(message, DEFAULT_ERROR_MESSAGE_LIMIT),
        suggestion=suggestion,
    )
    return ToolResult(status=ResultStatus.ERROR, error=info)


def answer_result(answer: JsonRpcResponse, call: PendingCall, schema: Any) -> ToolResult:
    if call.method == APPROVE_METHOD:
        return approvals.answer_record(answer)
    if answer.error is not None:
        return client_error_result(answer.error, call.method)
    if schema is not None:
        problems = sorted(
            jsonschema.Draft202012Validator(schema).iter_errors(answer.result), key=str
        )
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path) or "(root)"
            return error_result(
                ErrorCode.E_TOOL_INVALID_RESULT,
                f"the client's result for {call.method} does not match the export's "
                f"resultSchema at {where}: {problems[0].message}",
                suggestion="the client must answer with a result of the declared shape",
            )
    return ok_result(answer.result)


def expired_result(call: PendingCall) -> ToolResult:
    ttl = round(call.expires_at - call.created_at, 3)
    return error_result(
        ErrorCode.E_TOOL_DEFERRED_EXPIRED,
        f"the client did not answer {call.method} (call {call.id}) within its TTL of {ttl} s",
        suggestion="tell the user the request timed out; call the tool again if still needed",
    )


SubmitFn = Callable[[PendingCall], Awaitable[None]]


class DeferredCalls:
    """The child's side of the cycle: persist, submit, await the answer or the TTL."""

    def __init__(
        self,
        store: PendingStore,
        policy: DeferredPolicy,
        submit: SubmitFn,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.policy = policy
        self._submit = submit
        self._clock = clock
        self._waiting: dict[str, tuple[PendingCall, asyncio.Future[ToolResult]]] = {}
        self.parked = asyncio.Event()
        """Set while a turn waits for a client: a draining child may stop it then."""
        self.on_park: Callable[[], None] = lambda: None
        """Called after `parked` is set or cleared (the child stops or resumes beating)."""
        self._resuming: tuple[str, list[PendingCall]] | None = None
        self._answers: dict[str, JsonRpcResponse] = {}
        """Answers the orchestrator handed over before their call was waited for (a new
        process gets them on `ready`, before its resumed turn reaches the call)."""
        self._answered: set[str] = set()
        """Calls whose result was handed to the turn and is not yet in the conversation: their
        files stay until it is (`recorded`), so a process that dies in between leaves the
        answer for the next one instead of losing it."""
        self._carried: dict[str, PendingCall] = {}
        """Approval calls of a resumed turn: the tool call runs again through its pipeline and
        its approval gate waits here on the call an earlier process made."""

    async def hook(self, ctx: ToolCallMwContext, request: DeferredRequest) -> ToolResult:
        """The `DeferredHook`: suspend the turn until the client answers or the TTL passes."""
        carried = self._carried.pop(ctx.call.id, None)
        if carried is not None and carried.method == request.method:
            return await self.wait(carried)
        turn = ctx.step.turn
        now = self._clock()
        call = PendingCall(
            id=ctx.call.id,
            method=request.method,
            params=request.params,
            message=request.message,
            agent=turn.agent_name,
            instance_key=turn.instance_key,
            tool_name=ctx.call.name,
            turn_id=turn.turn_id,
            step=ctx.step.index,
            event=msgspec.to_builtins(turn.event),
            created_at=now,
            expires_at=now + self.policy.ttl(ctx.call.name),
        )
        self.store.save(call)
        log.info("deferred_submitted", call_id=call.id, method=call.method)
        await self._submit(call)
        return await self.wait(call)

    def pending(self) -> list[PendingCall]:
        """Calls a previous process left suspended (a restart resumes their turn)."""
        return self.store.load()

    def resume_event(self) -> AgentEvent | None:
        """At start: the originating event of a turn an earlier process left waiting for its
        client; the child runs it first, and `resumed_for` makes that run a resume."""
        calls = self.pending()
        if not calls:
            return None
        event = msgspec.convert(calls[0].event, AgentEvent)
        self._resuming = (event.id, calls)
        log.info("turn_resuming", event_id=event.id, calls=[c.id for c in calls])
        return event

    def resumed_for(self, event: AgentEvent) -> Resumed | None:
        if self._resuming is None or self._resuming[0] != event.id:
            return None
        calls = self._resuming[1]
        self._resuming = None
        return self.resumed(calls)

    async def wait(self, call: PendingCall) -> ToolResult:
        """Until answered or expired. The files go once the result is in the conversation
        (`recorded`); a cancelled wait keeps them."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ToolResult] = loop.create_future()
        self._waiting[call.id] = (call, future)
        self.parked.set()
        self.on_park()
        timer = loop.call_later(max(0.0, call.expires_at - self._clock()), self._expire, call.id)
        try:
            self._take(call)  # answered before this wait (while no process was running)
            result = await future
        finally:
            timer.cancel()
            self._waiting.pop(call.id, None)
            if not self._waiting:
                self.parked.clear()
                self.on_park()
        if call.method == APPROVE_METHOD:
            # an approval is spent here: the tool runs next, and a death during its run must
            # not find the approval again and run a non-idempotent tool a second time
            self.store.remove(call.id)
        else:  # the answer is the result: kept until it is in the conversation
            self._answered.add(call.id)
        log.info("deferred_resolved", call_id=call.id, status=result.status.value)
        return result

    def recorded(self, call_id: str) -> None:
        """The turn wrote the result of `call_id` to the conversation: its files can go."""
        if call_id in self._answered:
            self._answered.discard(call_id)
            self.store.remove(call_id)

    def forget_turn(self, event_id: str) -> None:
        """The turn of `event_id` ended: no call of it waits any more. Files left by a process
        that died after writing a result and before removing them go now."""
        for call in self.pending():
            if call.event.get("id") == event_id:
                self._answered.discard(call.id)
                self._answers.pop(call.id, None)
                self.store.remove(call.id)

    def on_answer(self, call_id: str, answer: Any) -> None:
        """`deferred_resolve` from the orchestrator, with the answer it recorded."""
        try:
            self._answers[call_id] = msgspec.convert(answer, JsonRpcResponse)
        except msgspec.ValidationError as exc:
            log.warning("deferred_answer_invalid", call_id=call_id, error=str(exc))
            return
        waiting = self._waiting.get(call_id)
        if waiting is not None:
            self._take(waiting[0])

    def _take(self, call: PendingCall) -> None:
        waiting = self._waiting.get(call.id)
        if waiting is None or waiting[1].done() or call.id not in self._answers:
            return
        answer = self._answers.pop(call.id)
        call_id, future = call.id, waiting[1]
        try:
            result = answer_result(answer, call, self.policy.schema(call.tool_name))
        except Exception as exc:  # a bad answer or schema must not stop the frame loop
            log.exception("deferred_answer_failed", call_id=call_id)
            result = error_result(ErrorCode.E_TOOL, f"the client's answer failed: {exc!r}")
        future.set_result(result)

    def _expire(self, call_id: str) -> None:
        waiting = self._waiting.get(call_id)
        if waiting is not None and not waiting[1].done():
            log.info("deferred_expired", call_id=call_id)
            waiting[1].set_result(expired_result(waiting[0]))

    def resumed(self, calls: list[PendingCall]) -> Resumed:
        """How a new process continues the turn `calls` suspended: await each call's answer
        (or its expiry); a later call of the same step that never ran is answered with a
        coded error (its handler was not run). A call waiting for approval runs again through
        the tool-call pipeline, whose approval gate takes over its pending call (`hook`)."""
        by_id = {c.id: c for c in calls}
        approving = {c.id: c for c in calls if c.method == APPROVE_METHOD}
        self._carried.update(approving)

        async def answer(call: ToolCall) -> ToolResult:
            pending = by_id.get(call.id)
            if pending is not None:
                return await self.wait(pending)
            return error_result(
                ErrorCode.E_AGENT_CRASHED,
                f"{call.name} was not run: the agent process restarted while an earlier "
                "call of the same step waited for its client",
                suggestion="call it again if it is still needed",
            )

        return Resumed(
            turn_id=calls[0].turn_id,
            step=calls[0].step,
            answer=answer,
            rerun=frozenset(approving),
        )


class Deferring(Protocol):
    """A turn runner whose tools may defer calls (`agent_process.runtime.AgentRuntime`)."""

    deferred_policy: DeferredPolicy

    def set_deferred_hook(
        self, hook: DeferredHook, recorded: Callable[[str], None] | None = None
    ) -> None: ...


def install(runner: Deferring, calls: DeferredCalls) -> None:
    """Plug `calls` into `runner`: the runner's policy (from the bundle), `calls`'s hook."""
    calls.policy = runner.deferred_policy
    runner.set_deferred_hook(calls.hook, calls.recorded)


def submit_frame(sender: str, call: PendingCall) -> Call:
    args = {"call": msgspec.to_builtins(call)}
    payload = CallPayload(call_id=call.id, op=CallOp.DEFERRED_SUBMIT, args=args)
    return Call(from_=sender, to=ORCHESTRATOR, payload=payload)


async def unless_parked(
    turn: Awaitable[T], draining: asyncio.Event, parked: asyncio.Event
) -> T | None:
    """The turn's result, or None when the process drains while the turn waits for a client:
    the turn is cancelled then (its pending call stays on disk for the next process)."""
    task: asyncio.Future[T] = asyncio.ensure_future(turn)

    async def park_wanted() -> None:
        await draining.wait()
        await parked.wait()

    park = asyncio.ensure_future(park_wanted())
    try:
        either: set[asyncio.Future[Any]] = {task, park}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        park.cancel()
    if not task.done():
        task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return None
