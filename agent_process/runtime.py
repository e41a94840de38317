"""AgentRuntime: everything inside one agent process except the process main loop.

The process main loop (`agent_process.child`) creates one runtime after `hello`, reports
`tool_names` in `ready` (or the `StartFailure`'s error in `start_error`), feeds it one event at a
time with `run_turn`, and calls `close` on shutdown.

Durability points: `run_turn` returns only after the turn's conversation was folded into
`base.jsonl` (fsynced), extension state saved and runtime events flushed, so a reply sent after
it never refers to state that could be lost. Within a turn every message event is written as it
happens (see `agent_process.store`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from agent_process import otel, resolve
from agent_process.assembly import Parts, StartRequest, assemble, save_states
from agent_process.deferred import DeferredPolicy
from agent_process.extensions import ExtensionFailure
from agent_process.middleware_contexts import TurnResult
from agent_process.models import ModelError
from agent_process.models.fallback import FallbackChain
from agent_process.models.governed import Governed
from agent_process.registry import ToolRegistryError
from agent_process.streaming import DeltaOut
from agent_process.toolcall import DeferredHook
from agent_process.turn import Resumed
from bundles.model import Bundle
from bundles.sdk import AgentsRuntime
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent
from protocol.messages import TurnOutcome

__all__ = ["AgentRuntime", "StartFailure", "TurnResult"]


class StartFailure(Exception):
    """A coded reason the agent cannot start (E_TOOL_LOAD, E_EXT_*, E_CONFIG_*, E_MODEL_*)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class AgentRuntime:
    """One agent instance: model, tools, extensions, pipelines, conversation, runtime events.

    Build it with `create`; the attributes besides the interface (`model`, `registry`, `store`,
    `bus`, `extensions`, `paths`, `mcp`) are there for tests and diagnostics.
    """

    def __init__(self, parts: Parts, *, export_spans: bool = True) -> None:
        self._engine = parts.engine
        self._tool_calls = parts.tool_calls
        self.model = parts.model
        self.registry = parts.registry
        self.store = parts.store
        self.bus = parts.bus
        self.extensions = parts.extensions
        self.paths = parts.paths
        self.mcp = parts.mcp
        self.meter = parts.meter
        """What the turns did since the child last reported it (the daemon's metrics)."""
        # None unless OTEL_* ask for OTLP export (and never for a runtime on a sink)
        self._otel = otel.install(parts.bus) if export_spans else None
        self._lock = asyncio.Lock()
        self._closed = False
        self.deferred_policy = DeferredPolicy()
        """TTL and resultSchema of deferred calls; the child sets it from the bundle."""

    @classmethod
    async def create(
        cls,
        *,
        bundle: Bundle,
        agent: str,
        instance_key: str,
        swarm: str,
        layout: StateLayout,
        agents: AgentsRuntime | None = None,
        workdir: Path | None = None,
        sink: int | None = None,
        env_files: tuple[Path, ...] = (),
    ) -> AgentRuntime:
        """Load model, tools and extensions and replay the conversation; raise StartFailure.
        With `sink` nothing reaches the disk or an exporter (`StartRequest.sink`)."""
        request = StartRequest(
            bundle, agent, instance_key, swarm, layout, agents, workdir, sink, env_files
        )
        try:
            return cls(await assemble(request), export_spans=sink is None)
        except (resolve.ConfigProblem, ModelError) as exc:
            raise StartFailure(exc.info) from exc
        except (ToolRegistryError, ExtensionFailure) as exc:
            suggestion = getattr(exc, "suggestion", None)
            info = ErrorInfo(code=exc.code.value, message=exc.message, suggestion=suggestion)
            raise StartFailure(info) from exc

    @property
    def tool_names(self) -> list[str]:
        """Registry names, for the `ready` frame."""
        return self.registry.names

    @property
    def recovered_events(self) -> int:
        """Message events replayed from a previous process's unfolded log."""
        return self.store.recovered_events

    def set_deferred_hook(
        self, hook: DeferredHook, recorded: Callable[[str], None] | None = None
    ) -> None:
        """Where the deferred-call cycle (ARCHITECTURE.md §10) plugs in: `hook(ctx, request)` gets
        every call whose handler raised `CallDeferred` and returns its final ToolResult;
        `recorded(call_id)` hears when a tool result is in the conversation."""
        self._tool_calls.deferred_hook = hook
        if recorded is not None:
            self._tool_calls.recorded = recorded

    def stream_to(self, out: DeltaOut) -> None:
        """Where a turn whose requester asked for a stream (`replyTo.stream`) sends its
        deltas: the child's link (ARCHITECTURE.md §4)."""
        self._engine.deltas = out

    def stream_rest(self) -> None:
        """The answer to this instance's client-side call asked to stream (TurnEngine)."""
        self._engine.stream_rest()

    async def ask_ahead(self, event: AgentEvent) -> None:
        """A turn is about to start: its first model call's permit is asked now (the primary
        Model's; agent_process/permit_ahead.py)."""
        model = self.model
        primary = model.links[0] if isinstance(model, FallbackChain) else model
        if isinstance(primary, Governed):
            await primary.ask_ahead(event.id, len(event.input))

    async def run_turn(self, event: AgentEvent, resumed: Resumed | None = None) -> TurnResult:
        """One turn (or the rest of a suspended one, `resumed`); never raises for a failed
        turn (outcome FAILED with a coded error)."""
        async with self._lock:
            if self._closed:
                return TurnResult(
                    turn_id="",
                    event_id=event.id,
                    outcome=TurnOutcome.FAILED,
                    error=ErrorInfo(
                        code=ErrorCode.E_AGENT_SHUTTING_DOWN,
                        message="the agent runtime is closed",
                    ),
                )
            return await self._engine.run(event, resumed)

    async def close(self) -> None:
        """Fold the log, save extension state, flush events, close the model client, stop the
        MCP servers (no server process outlives the runtime)."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            save_states(self.extensions)
            self.store.close()
            await self.bus.drain()
            self.bus.close()
            if self._otel is not None:  # after the bus: every span's end event was delivered
                await self._otel.close()
            try:
                await self.model.aclose()
            finally:
                await self.mcp.close()
