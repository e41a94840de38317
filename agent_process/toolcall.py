"""One tool call through the `toolCall` onion: catalog check, registry lookup, executor.

The core refuses a name the model was not offered this step (`E_TOOL_NOT_IN_CATALOG`), then
runs the tool (`executor.execute`) and, when the handler deferred the call to the client
(`CallDeferred`), hands it to the deferred hook, where the JSON-RPC cycle of
ARCHITECTURE.md §10 plugs in (agent_process/deferred.py). A runner built without a client
channel keeps `reject_deferred`, which answers with a coded error.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from agent_process import approvals
from agent_process.approvals import Approval
from agent_process.bridge import CURRENT_SPAN
from agent_process.executor import execute
from agent_process.middleware_contexts import StepContext, ToolCallMwContext
from agent_process.pipeline import PipelineKind, Pipelines
from agent_process.registry import ToolEntry, ToolRegistry
from agent_process.results import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    DeferredRequest,
    ResultStatus,
    ToolResult,
    error_result,
    result_from_exception,
)
from agent_process.telemetry import EventBus, RuntimeEvent
from agent_process.tool_context import ToolCallContext
from bundles.limits import NO_LIMITS, Limits
from bundles.sdk import AgentsRuntime, MiddlewareError
from protocol.conversation import Message, ToolCall
from protocol.errors import ErrorCode
from protocol.private import private_dir

DeferredHook = Callable[[ToolCallMwContext, DeferredRequest], Awaitable[ToolResult]]


async def reject_deferred(ctx: ToolCallMwContext, request: DeferredRequest) -> ToolResult:
    return error_result(
        ErrorCode.E_TOOL_DEFERRED_REJECTED,
        f"{ctx.tool_name} must run on the client ({request.method}), and this process has "
        "no client channel for deferred calls",
        suggestion="use a connector or the goondan CLI that answers deferred calls",
    )


def _nothing(call_id: str) -> None:
    return None


class ToolCallRunner:
    def __init__(
        self,
        *,
        registry: ToolRegistry,
        pipelines: Pipelines,
        bus: EventBus,
        workdir: Path,
        logger: Any,
        runtime: AgentsRuntime,
        secret_values: frozenset[str],
        deferred_hook: DeferredHook = reject_deferred,
        default_timeout_ms: int | None = None,
        make_workdir: bool = True,
        approval_rules: Mapping[str, Approval] | None = None,
        limits: Limits = NO_LIMITS,
    ) -> None:
        self._registry = registry
        self._pipelines = pipelines
        self._bus = bus
        self._workdir = workdir
        self._logger = logger
        self._runtime = runtime
        self._secret_values = secret_values
        self.deferred_hook = deferred_hook
        self.recorded: Callable[[str], None] = _nothing
        """Told each call id whose result the turn wrote to the conversation."""
        self._default_timeout_ms = default_timeout_ms
        self._make_workdir = make_workdir
        """Create the workdir before the first handler runs (not at start: an instance
        that never calls a tool leaves no empty directory)."""
        self._approvals = dict(approval_rules or {})
        self._limits = limits

    def idempotent(self, name: str) -> bool:
        """Whether a call of `name` cut by a crash may simply run again."""
        entry = self._registry.get(name)
        return entry is not None and entry.idempotent

    async def run(self, step: StepContext, call: ToolCall, message: Message) -> ToolResult:
        ctx = ToolCallMwContext(step=step, call=call, message=message, span=step.span.child())
        started = time.perf_counter()
        self._emit("tool.called", ctx, None, None)
        stream = step.turn.stream
        if stream is not None:
            stream.tool_started(call)
        try:
            result = await self._pipelines.run(PipelineKind.TOOL_CALL, ctx, self._core)
        except MiddlewareError as exc:
            entry = self._registry.get(call.name)
            limit = entry.error_message_limit if entry else DEFAULT_ERROR_MESSAGE_LIMIT
            result = result_from_exception(exc, limit)
        failed = result.status is ResultStatus.ERROR
        if result.traceback is not None:  # the operator's, not the model's: the log (masked)
            self._logger.error("tool_raised", tool=call.name, call_id=call.id,
                               traceback=result.traceback)  # fmt: skip
        self._emit(
            "tool.failed" if failed else "tool.completed",
            ctx,
            result,
            (time.perf_counter() - started) * 1000,
        )
        if stream is not None:
            stream.tool_finished(call, result.status.value)
        return result

    async def _core(self, ctx: ToolCallMwContext) -> ToolResult:
        call = ctx.call
        if call.name not in ctx.step.catalog_names:
            return _not_in_catalog(call.name, ctx.step.catalog_names)
        entry = self._registry.get(call.name)
        if entry is None:
            return error_result(
                ErrorCode.E_TOOL_NOT_FOUND,
                f"{call.name} is in this step's catalog but no tool of that name is registered",
                suggestion="the step middleware that added it must add a registered tool",
            )
        if call.invalid_args is not None:
            return error_result(
                ErrorCode.E_TOOL_INVALID_ARGS,
                f"the arguments of {call.name} are not a JSON object: {call.invalid_args}",
                limit=entry.error_message_limit,
                suggestion="send the arguments as one JSON object",
            )
        rule = self._approvals.get(call.name)
        if rule is not None:
            refused = await self._approve(ctx, entry, rule)
            if refused is not None:
                return refused
        token = CURRENT_SPAN.set(ctx.span)  # an `agents` call made here is this span's child
        try:
            result = await execute(entry, self._tool_context(entry, ctx), ctx.args,
                                   self._default_timeout_ms, self._limits)  # fmt: skip
        finally:
            CURRENT_SPAN.reset(token)
        if result.deferred is not None:
            result = await self.deferred_hook(ctx, result.deferred)
        return result

    async def _approve(
        self, ctx: ToolCallMwContext, entry: ToolEntry, rule: Approval
    ) -> ToolResult | None:
        """None when the call may run: its rule does not apply to these arguments, or a person
        approved it; else the result the model gets (denied, expired, invalid arguments)."""
        if entry.validator is not None:  # nobody is asked about a call that could not run
            try:
                entry.validator.validate(ctx.args)
            except Exception as exc:
                return result_from_exception(exc, entry.error_message_limit)
        if not rule.applies(ctx.args):
            return None
        answer = await self.deferred_hook(ctx, rule.request(ctx.call.name, ctx.args))
        self._emit("tool.approval", ctx, None, None, data=approvals.record(answer))
        return approvals.decided(answer, ctx.call.name)

    def _tool_context(self, entry: ToolEntry, ctx: ToolCallMwContext) -> ToolCallContext:
        if self._make_workdir:
            private_dir(self._workdir)
            self._make_workdir = False
        turn = ctx.step.turn
        return ToolCallContext(
            workdir=self._workdir,
            base_logger=self._logger,
            runtime=self._runtime,
            message=ctx.message,
            tool_call_id=ctx.call.id,
            tool_name=entry.name,
            agent_name=turn.agent_name,
            instance_key=turn.instance_key,
            trace_id=ctx.span.trace_id,
            config=entry.config,
            secret_values=self._secret_values,
        )

    def _emit(
        self,
        kind: str,
        ctx: ToolCallMwContext,
        result: ToolResult | None,
        duration_ms: float | None,
        data: dict[str, Any] | None = None,
    ) -> None:
        if not self._bus.active:
            return
        turn = ctx.step.turn
        if result is not None and result.traceback:
            data = {"traceback": result.traceback}
        self._bus.emit(
            RuntimeEvent(
                type=kind,
                at=time.time(),
                agent=turn.agent_name,
                instance_key=turn.instance_key,
                trace_id=ctx.span.trace_id,
                span_id=ctx.span.span_id,
                parent_span_id=ctx.span.parent_span_id,
                turn_id=turn.turn_id,
                step=ctx.step.index,
                tool_name=ctx.call.name,
                tool_call_id=ctx.call.id,
                status=result.status.value if result is not None else None,
                duration_ms=duration_ms,
                error=result.error if result is not None else None,
                data=data,
            )
        )


def _not_in_catalog(name: str, names: frozenset[str]) -> ToolResult:
    offered = ", ".join(sorted(names)) or "none"
    return error_result(
        ErrorCode.E_TOOL_NOT_IN_CATALOG,
        f"{name} is not in this step's tool catalog (offered: {offered})",
        suggestion="call one of the tools offered in this step",
    )
