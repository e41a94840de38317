"""`required-tools-guard`: the model may not finish a turn before it called the required tools.

`requiredTools` lists full tool names (`bash__exec`) or resource names (`bash`: any of its
exports). When a step ends without tool calls (the model's final answer) while a required tool
that is in this step's catalog has not completed successfully in this turn, the guard appends a
reminder (a user message naming the missing tools) and runs the step again. After `maxReminders`
(default 2) reminders, `onMissing` decides: `fail` (default) fails the turn with
`E_EXT_REQUIRED_TOOLS_MISSING`, `allow` lets the answer stand. A call counts when its result is
`ok` or `pending` (with `requireSuccess: false`, any call counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bundles.sdk import (
    ExtensionApi,
    MiddlewareError,
    StepMiddlewareContext,
    ToolCallMiddlewareContext,
    TurnMiddlewareContext,
)
from protocol.errors import ErrorCode

REMINDER = (
    "[required-tools-guard] Before you give your final answer you must call: {tools}. "
    "Call {them} now."
)


class Settings:
    def __init__(self, config: Mapping[str, Any]) -> None:
        required = config.get("requiredTools", [])
        if not isinstance(required, list) or not all(isinstance(t, str) for t in required):
            raise ValueError("config requiredTools must be a list of tool names")
        self.required: tuple[str, ...] = tuple(required)
        self.max_reminders = int(config.get("maxReminders", 2))
        self.on_missing = str(config.get("onMissing", "fail"))
        if self.on_missing not in ("fail", "allow"):
            raise ValueError(f"config onMissing must be fail or allow, got {self.on_missing!r}")
        self.require_success = bool(config.get("requireSuccess", True))


def satisfies(required: str, tool_name: str) -> bool:
    return tool_name == required or tool_name.startswith(required + "__")


class TurnState:
    __slots__ = ("called", "reminders")

    def __init__(self) -> None:
        self.called: set[str] = set()
        self.reminders = 0


def missing(settings: Settings, state: TurnState, catalog: list[Any]) -> list[str]:
    """Required tools not yet called that the model could call in this step."""
    offered = [str(item.name) for item in catalog]
    return [
        req
        for req in settings.required
        if any(satisfies(req, name) for name in offered)
        and not any(satisfies(req, name) for name in state.called)
    ]


class Guard:
    """The three layers of the guard, sharing per-turn state (dropped when the turn ends)."""

    def __init__(self, api: ExtensionApi, settings: Settings) -> None:
        self.api = api
        self.settings = settings
        self.turns: dict[str, TurnState] = {}

    def state_of(self, turn_id: str) -> TurnState:
        return self.turns.setdefault(turn_id, TurnState())

    async def turn(self, ctx: TurnMiddlewareContext) -> Any:
        try:
            return await ctx.next()
        finally:
            self.turns.pop(ctx.turn_id, None)

    async def tool_call(self, ctx: ToolCallMiddlewareContext) -> Any:
        result = await ctx.next()
        status = str(getattr(result, "status", "ok"))
        if not self.settings.require_success or status in ("ok", "pending"):
            self.state_of(ctx.step.turn.turn_id).called.add(ctx.tool_name)
        return result

    async def step(self, ctx: StepMiddlewareContext) -> Any:
        state = self.state_of(ctx.turn.turn_id)
        while True:
            result = await ctx.next()
            if getattr(result, "tool_calls", None):
                return result  # the turn goes on: nothing to enforce yet
            names = missing(self.settings, state, ctx.tool_catalog)
            if not names or self._give_up(names, state):
                return result
            state.reminders += 1
            self.api.logger.info("required_tools_guard.reminder", missing=names, n=state.reminders)
            text = REMINDER.format(tools=", ".join(names), them="it" if len(names) == 1 else "them")
            ctx.turn.conversation.append("user", text, metadata={"extension": self.api.name})

    def _give_up(self, names: list[str], state: TurnState) -> bool:
        """True to let the answer stand; raises to fail the turn (onMissing: fail)."""
        if state.reminders < self.settings.max_reminders:
            return False
        if self.settings.on_missing == "allow":
            return True
        raise MiddlewareError(
            f"the model finished without calling the required tool(s) {', '.join(names)}",
            code=ErrorCode.E_EXT_REQUIRED_TOOLS_MISSING,
            suggestion="Make the prompt ask for these tools, or relax requiredTools.",
        )


def register(api: ExtensionApi, config: Mapping[str, Any]) -> None:
    guard = Guard(api, Settings(config))
    api.pipeline.register("turn", guard.turn)
    api.pipeline.register("toolCall", guard.tool_call)
    api.pipeline.register("step", guard.step)
