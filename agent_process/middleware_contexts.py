"""The contexts the three middleware kinds receive (bundles.sdk *MiddlewareContext Protocols)."""

from __future__ import annotations

from typing import Any

import msgspec

from agent_process.catalog import CatalogBuilder, CatalogItem
from agent_process.models.base import Usage
from agent_process.pipeline import _Onion
from agent_process.results import ToolResult
from agent_process.store import ConversationStore
from agent_process.streaming import TurnStream
from bundles import sdk
from protocol.conversation import Message, ToolCall
from protocol.errors import ErrorInfo
from protocol.events import AgentEvent, TraceContext
from protocol.messages import TurnOutcome


class TurnResult(msgspec.Struct, kw_only=True):
    """What one turn produced (one AgentEvent in, one TurnResult out)."""

    turn_id: str
    event_id: str
    outcome: TurnOutcome
    text: str = ""
    error: ErrorInfo | None = None
    steps: int = 0
    usage: dict[str, int] = msgspec.field(default_factory=dict)


class StepResult(msgspec.Struct, kw_only=True):
    index: int
    text: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    results: list[ToolResult] = msgspec.field(default_factory=list)
    usage: Usage = msgspec.field(default_factory=Usage)
    finish_reason: str | None = None


class TurnContext(_Onion[TurnResult]):
    __slots__ = (
        "agent_name",
        "agents",
        "conversation",
        "event",
        "instance_key",
        "metadata",
        "span",
        "steps",
        "stream",
        "turn_id",
        "usage",
    )

    def __init__(
        self,
        *,
        event: AgentEvent,
        turn_id: str,
        agent_name: str,
        instance_key: str,
        conversation: ConversationStore,
        span: TraceContext,
        agents: sdk.AgentsRuntime | None = None,
        stream: TurnStream | None = None,
    ) -> None:
        self.event = event
        self.stream = stream
        """Where this turn's deltas go, when its requester asked for them."""
        self.agents = agents
        """The `agents` bridge (request/send through the orchestrator), as tools get it."""
        self.turn_id = turn_id
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.conversation = conversation
        self.span = span
        self.steps = 0
        self.usage: dict[str, int] = {}
        self.metadata: dict[str, Any] = {}
        """Free-form scratch space shared by the layers of this turn."""


class StepContext(_Onion[StepResult]):
    __slots__ = ("_catalog", "catalog_names", "index", "span", "tool_catalog", "turn")

    def __init__(
        self, *, turn: TurnContext, index: int, catalog: CatalogBuilder, span: TraceContext
    ) -> None:
        self.turn = turn
        self.index = index
        self._catalog = catalog
        self.tool_catalog: list[CatalogItem] = catalog.build()
        self.catalog_names: frozenset[str] = frozenset()
        """The names sent to the model this step: the allow-list for its tool calls."""
        self.span = span

    def catalog_item(self, name: str) -> CatalogItem:
        return self._catalog.item(name)

    @property
    def agents(self) -> sdk.AgentsRuntime | None:
        return self.turn.agents


class ToolCallMwContext(_Onion[ToolResult]):
    __slots__ = ("args", "call", "message", "span", "step")

    def __init__(
        self, *, step: StepContext, call: ToolCall, message: Message, span: TraceContext
    ) -> None:
        self.step = step
        self.call = call
        self.args: Any = call.args
        self.message = message
        self.span = span

    @property
    def tool_name(self) -> str:
        return self.call.name

    @property
    def tool_call_id(self) -> str:
        return self.call.id


def _conforms(
    turn: TurnContext, step: StepContext, call: ToolCallMwContext
) -> tuple[sdk.TurnMiddlewareContext, sdk.StepMiddlewareContext, sdk.ToolCallMiddlewareContext]:
    """Never called: makes mypy check these contexts against the SDK's Protocols."""
    return turn, step, call
