"""The Turn/Step engine (ARCHITECTURE.md §6): one AgentEvent in, one TurnResult out.

A turn appends the input as a user message and runs steps through the `step` onion: each step
builds the catalog, lets step middleware edit it, sends system prompt + conversation + catalog
to the model, appends the assistant message, runs its tool calls in order (each through the
`toolCall` onion) and appends their results. Steps continue while the model calls tools, up to
`maxStepsPerTurn` (outcome `max_steps`). The system prompt is sent on every step; the engine
injects no other text. `run` never raises for a failed turn: it returns outcome `failed` with
a coded error.

`run(event, resumed)` continues a turn a deferred tool call suspended in an earlier process
(ARCHITECTURE.md §10): the conversation already holds the assistant message with the tool
calls, so it appends their results (`Resumed.answer`) and continues the step loop after the
step it stopped in.

Each event's turn is recorded in the conversation: its user message carries the event id from
the start and the turn's outcome once it ends (written before the turn-end fold). The daemon
delivers an accepted event again after a crash until it hears the turn ended, so `run` first
looks for that record: an event whose turn ended is answered from the conversation without a
second turn; one whose turn was cut (the process died mid-turn) is resumed from its last
recorded step, a tool call cut mid-way running again if its export is `idempotent`, else
answered with E_AGENT_CRASHED.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgspec
import structlog

from agent_process.catalog import CatalogBuilder, names_of
from agent_process.inbox import WAKE_EVENT_TYPE, Inbox
from agent_process.middleware_contexts import StepContext, StepResult, TurnContext, TurnResult
from agent_process.models.base import Model, ModelError, ModelRequest, usage_sum
from agent_process.pipeline import PipelineKind, Pipelines
from agent_process.results import ToolResult, error_result
from agent_process.store import ConversationStore
from agent_process.streaming import DeltaOut, stream_of
from agent_process.telemetry import EventBus, RuntimeEvent
from agent_process.toolcall import ToolCallRunner
from bundles.sdk import AgentsRuntime, MiddlewareError
from protocol.conversation import Message, Role, ToolCall, dangling_calls, new_message
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, TraceContext
from protocol.jsontypes import JsonObject
from protocol.messages import TurnOutcome

_log = structlog.get_logger("goondan.turn")
TURN_OUTCOME = "turnOutcome"
"""On an event's user message: its turn ended, with this outcome (see the module docstring)."""
TURN_ERROR = "turnError"


def _record_of(messages: list[Message], event_id: str) -> Message | None:
    """The user message that recorded `event_id`'s turn (newest first: redeliveries are of
    recent events)."""
    for message in reversed(messages):
        if message.role is Role.USER and message.metadata.get("eventId") == event_id:
            return message
    return None


def _cut_result(call: ToolCall) -> ToolResult:
    return error_result(
        ErrorCode.E_AGENT_CRASHED,
        f"the agent process stopped before {call.name} returned; its effect is unknown",
        suggestion="check whether the action happened before repeating it",
    )


@dataclass(slots=True)
class TurnDeps:
    agent_name: str
    instance_key: str
    model: Model
    model_params: JsonObject
    system_prompt: str
    max_steps: int
    catalog: CatalogBuilder
    pipelines: Pipelines
    store: ConversationStore
    bus: EventBus
    tool_calls: ToolCallRunner
    at_turn_end: Callable[[], None]
    """Durability point: fold the log, save extension state, flush runtime events."""
    inbox: Inbox | None = None
    """Async `agents__request` replies, injected at the start of every step."""
    agents: AgentsRuntime | None = None
    """`ctx.agents` of turn and step middleware."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """A turn suspended by deferred calls, resumed by a later process."""

    turn_id: str
    step: int
    answer: Callable[[ToolCall], Awaitable[ToolResult]]
    """The result of each unanswered tool call of the last assistant message."""
    rerun: frozenset[str] = frozenset()
    """Calls that run again through the tool-call pipeline instead (those waiting for a
    person's approval: their gate takes over the pending call)."""


class TurnEngine:
    def __init__(self, deps: TurnDeps) -> None:
        self._d = deps
        self.deltas: DeltaOut | None = None
        """How a turn streams to a requester that asked (the child's link); None: never."""
        self._running: TurnContext | None = None
        self._stream_resumed = False
        """The answer that resumes the next turn asked to stream (`stream_rest`)."""

    def stream_rest(self) -> None:
        """An answer to a client-side call of this instance asked to stream: the rest of the
        turn streams under its first request's correlation id (where the connector waits),
        now if the turn runs, else once it resumes in this process."""
        ctx = self._running
        if ctx is None:
            self._stream_resumed = True
        elif ctx.stream is None:
            ctx.stream = stream_of(self.deltas, ctx.event, asked=True)

    async def run(self, event: AgentEvent, resumed: Resumed | None = None) -> TurnResult:
        d = self._d
        record = _record_of(d.store.messages, event.id) if resumed is None else None
        if record is not None and TURN_OUTCOME in record.metadata:
            return self._done_before(event, record)
        span = event.trace.child()
        turn_id = resumed.turn_id if resumed else record.turn_id if record else None
        ctx = TurnContext(
            event=event,
            turn_id=turn_id or "t_" + uuid.uuid4().hex,
            agent_name=d.agent_name,
            instance_key=d.instance_key,
            conversation=d.store,
            span=span,
            agents=d.agents,
            stream=stream_of(
                self.deltas, event, asked=resumed is not None and self._stream_resumed
            ),
        )
        self._stream_resumed = False
        d.bus.current_trace_id = span.trace_id
        started = time.perf_counter()
        source = event.source  # who started it: Studio's swarm graph draws the edge
        self._emit("turn.started", ctx, span, data={"eventType": event.type,
                                                    "source": source.name,
                                                    "sourceKind": source.kind.value})  # fmt: skip
        if resumed is not None:
            ctx.steps = resumed.step
        core = self._turn_core
        if resumed is not None:
            core = partial(self._resume_core, resumed=resumed)
        elif record is not None:
            core = partial(self._continue_core, record=record)
        self._running = ctx
        try:
            result = await self._guarded(ctx, core)
        finally:
            self._running = None
        self._mark_ended(ctx, result)
        result = self._persist(ctx, result)
        kind = "turn.completed" if result.outcome is TurnOutcome.COMPLETED else "turn.failed"
        self._emit(
            kind,
            ctx,
            span,
            status=result.outcome.value,
            duration_ms=(time.perf_counter() - started) * 1000,
            usage=result.usage,
            steps=result.steps,
            error=result.error,
        )
        d.bus.flush()
        return result

    def _persist(self, ctx: TurnContext, result: TurnResult) -> TurnResult:
        """The turn-end durability point; a turn whose state cannot be saved has failed."""
        try:
            self._d.at_turn_end()
        except OSError as exc:  # disk full, permissions
            _log.error("turn_end_persist_failed", turn_id=ctx.turn_id, error=str(exc))
            return self._result(
                ctx,
                TurnOutcome.FAILED,
                result.text,
                ErrorInfo(
                    code=ErrorCode.E_AGENT_TURN_FAILED,
                    message=f"the turn's conversation could not be saved: {exc}",
                    suggestion="check free space and permissions of the state directory",
                ),
            )
        return result

    async def _guarded(
        self, ctx: TurnContext, core: Callable[[TurnContext], Awaitable[TurnResult]]
    ) -> TurnResult:
        try:
            return await self._d.pipelines.run(PipelineKind.TURN, ctx, core)
        except MiddlewareError as exc:
            info = ErrorInfo(code=exc.code, message=exc.message, suggestion=exc.suggestion)
        except ModelError as exc:
            info = exc.info
        except Exception as exc:  # the engine's own bug must not take the process down
            _log.exception("turn_crashed", turn_id=ctx.turn_id)
            info = ErrorInfo(
                code=ErrorCode.E_AGENT_TURN_FAILED,
                message=f"the turn failed: {type(exc).__name__}: {exc}",
                name=type(exc).__name__,
            )
        return self._result(ctx, TurnOutcome.FAILED, "", info)

    def _result(
        self, ctx: TurnContext, outcome: TurnOutcome, text: str, error: ErrorInfo | None
    ) -> TurnResult:
        return TurnResult(
            turn_id=ctx.turn_id,
            event_id=ctx.event.id,
            outcome=outcome,
            text=text,
            error=error,
            steps=ctx.steps,
            usage=dict(ctx.usage),
        )

    async def _turn_core(self, ctx: TurnContext) -> TurnResult:
        d = self._d
        event = ctx.event
        self._answer_interrupted_calls(ctx)
        if event.type != WAKE_EVENT_TYPE:  # a wake turn's input is the stored replies
            d.store.append(
                Role.USER.value,
                event.input,
                turn_id=ctx.turn_id,
                metadata={
                    "eventId": event.id,
                    "eventType": event.type,
                    "source": event.source.name,
                    "traceId": ctx.span.trace_id,  # for readers of the files (protocol.transcript)
                },
            )
        return await self._steps(ctx, 1)

    def _done_before(self, event: AgentEvent, record: Message) -> TurnResult:
        """The event's turn ended in an earlier process: its answer, from the conversation."""
        outcome = TurnOutcome(str(record.metadata[TURN_OUTCOME]))
        error = record.metadata.get(TURN_ERROR)
        answers = [m for m in self._d.store.messages
                   if m.turn_id == record.turn_id and m.role is Role.ASSISTANT]  # fmt: skip
        _log.info("turn_already_done", event_id=event.id, turn_id=record.turn_id,
                  outcome=outcome.value)  # fmt: skip
        return TurnResult(
            turn_id=record.turn_id or "",
            event_id=event.id,
            outcome=outcome,
            text=answers[-1].content if answers else "",
            error=msgspec.convert(error, ErrorInfo) if isinstance(error, dict) else None,
            steps=len(answers),
        )

    async def _continue_core(self, ctx: TurnContext, record: Message) -> TurnResult:
        """A turn cut by a crash: on from its last recorded step."""
        d = self._d
        mine = [m for m in d.store.messages if m.turn_id == ctx.turn_id]
        ctx.steps = sum(1 for m in mine if m.role is Role.ASSISTANT)
        _log.info("turn_resumed", event_id=ctx.event.id, turn_id=ctx.turn_id, step=ctx.steps)
        self._emit("turn.resumed", ctx, ctx.span, step=ctx.steps)
        last = mine[-1] if mine else None
        if last is not None and last.role is Role.ASSISTANT and not last.tool_calls:
            # cut after its final answer, before the outcome was recorded: that answer ends it
            return self._result(ctx, TurnOutcome.COMPLETED, last.content, None)
        for call in dangling_calls(d.store.messages):
            if d.tool_calls.idempotent(call.name):
                result = await self._run_again(ctx, call)
            else:
                result = _cut_result(call)
            self._append_result(ctx.turn_id, call, result)
        return await self._steps(ctx, ctx.steps + 1)

    async def _run_again(self, ctx: TurnContext, call: ToolCall) -> ToolResult:
        d = self._d
        step = StepContext(turn=ctx, index=ctx.steps, catalog=d.catalog, span=ctx.span.child())
        step.catalog_names = names_of(step.tool_catalog)
        asked = next(m for m in reversed(d.store.messages) if m.role is Role.ASSISTANT)
        _log.info("tool_call_rerun", tool=call.name, call_id=call.id, turn_id=ctx.turn_id)
        return await d.tool_calls.run(step, call, asked)

    def _mark_ended(self, ctx: TurnContext, result: TurnResult) -> None:
        """Record on the event's user message that its turn ended (and how), before the fold:
        a redelivery then answers from the conversation instead of running it again."""
        record = _record_of(self._d.store.messages, ctx.event.id)
        if record is None:  # a wake turn, or one that never got to write its input
            return
        marks: JsonObject = {TURN_OUTCOME: result.outcome.value}
        if result.error is not None:
            marks[TURN_ERROR] = msgspec.to_builtins(result.error)
        metadata = {**record.metadata, **marks}
        try:
            self._d.store.replace(record.id, record.content, metadata=metadata)
        except OSError as exc:  # the fold after it fails the same way and says so
            _log.error("turn_record_failed", turn_id=ctx.turn_id, error=str(exc))

    async def _resume_core(self, ctx: TurnContext, resumed: Resumed) -> TurnResult:
        for call in dangling_calls(self._d.store.messages):
            if call.id in resumed.rerun:
                result = await self._run_again(ctx, call)
            else:
                result = await resumed.answer(call)
            self._append_result(ctx.turn_id, call, result)
        return await self._steps(ctx, resumed.step + 1)

    async def _steps(self, ctx: TurnContext, first: int) -> TurnResult:
        d = self._d
        text = ""
        for index in range(first, d.max_steps + 1):
            step = await self._run_step(ctx, index)
            text = step.text
            if not step.tool_calls:
                return self._result(ctx, TurnOutcome.COMPLETED, text, None)
        error = ErrorInfo(
            code=ErrorCode.E_AGENT_MAX_STEPS,
            message=f"the turn stopped after maxStepsPerTurn={d.max_steps} steps while the "
            "model kept calling tools",
            suggestion="raise Swarm.spec.policy.maxStepsPerTurn or check the tools' results",
        )
        return self._result(ctx, TurnOutcome.MAX_STEPS, text, error)

    def _answer_interrupted_calls(self, ctx: TurnContext) -> None:
        for call in dangling_calls(self._d.store.messages):
            self._append_result(ctx.turn_id, call, _cut_result(call))

    async def _run_step(self, turn: TurnContext, index: int) -> StepResult:
        d = self._d
        span = turn.span.child()
        step = StepContext(turn=turn, index=index, catalog=d.catalog, span=span)
        started = time.perf_counter()
        self._emit("step.started", turn, span, step=index)
        try:
            result = await d.pipelines.run(PipelineKind.STEP, step, self._step_core)
        except Exception as exc:
            self._emit("step.failed", turn, span, step=index, data={"error": repr(exc)})
            raise
        turn.steps = index
        turn.usage = usage_sum(turn.usage, result.usage)
        self._emit(
            "step.completed",
            turn,
            span,
            step=index,
            duration_ms=(time.perf_counter() - started) * 1000,
            usage=result.usage.as_dict(),
            data={"toolCalls": len(result.tool_calls), "finishReason": result.finish_reason},
        )
        return result

    async def _step_core(self, step: StepContext) -> StepResult:
        d = self._d
        turn = step.turn
        self._take_inbox(turn)
        step.catalog_names = names_of(step.tool_catalog)
        stream = turn.stream
        if stream is not None:
            stream.step = step.index
        response = await d.model.complete(
            ModelRequest(
                system=d.system_prompt or None,
                messages=d.store.messages,
                tools=list(step.tool_catalog),
                params=d.model_params,
                on_text=stream.text if stream is not None else None,
            )
        )
        if stream is not None and response.tool_calls:
            stream.flush()  # the step's text goes before the tool calls' deltas
        elif stream is not None:
            stream.leave_to_reply()  # no tool calls: the turn's last step, its reply is next
        assistant = d.store.append(
            Role.ASSISTANT.value,
            response.text,
            tool_calls=response.tool_calls,
            turn_id=turn.turn_id,
        )
        results = []
        for call in response.tool_calls:
            result = await d.tool_calls.run(step, call, assistant)
            results.append(result)
            self._append_result(turn.turn_id, call, result)
        return StepResult(
            index=step.index,
            text=response.text,
            tool_calls=response.tool_calls,
            results=results,
            usage=response.usage,
            finish_reason=response.finish_reason,
        )

    def _append_result(self, turn_id: str, call: ToolCall, result: ToolResult) -> None:
        self._d.store.append_message(
            new_message(
                Role.TOOL,
                result.to_model_text(),
                tool_call_id=call.id,
                tool_name=call.name,
                turn_id=turn_id,
                metadata={"status": result.status.value},
            )
        )
        self._d.tool_calls.recorded(call.id)

    def _take_inbox(self, turn: TurnContext) -> None:
        """Append stored async replies as user messages marked as inter-agent responses; a
        reply file goes only once its message is written (never lost, at worst repeated)."""
        inbox = self._d.inbox
        if inbox is None:
            return
        for reply in inbox.replies():
            self._d.store.append(
                Role.USER.value, reply.text(), turn_id=turn.turn_id, metadata=reply.metadata()
            )
            reply.path.unlink(missing_ok=True)

    def _emit(self, kind: str, turn: TurnContext, span: TraceContext, **fields: Any) -> None:
        self._d.bus.emit(
            RuntimeEvent(
                type=kind,
                at=time.time(),
                agent=turn.agent_name,
                instance_key=turn.instance_key,
                trace_id=span.trace_id,
                span_id=span.span_id,
                parent_span_id=span.parent_span_id,
                turn_id=turn.turn_id,
                event_id=turn.event.id,
                **fields,
            )
        )
