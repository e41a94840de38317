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
from pathlib import Path

import structlog

from agent_process import resolve
from agent_process.catalog import CatalogBuilder
from agent_process.context import NotConnectedRuntime, agent_logger
from agent_process.contexts import TurnResult
from agent_process.extensions import ExtensionFailure, ExtensionHandle, load_extension
from agent_process.models import Model, ModelError, create_model
from agent_process.pipeline import Pipelines
from agent_process.registry import ToolEntry, ToolRegistry, ToolRegistryError
from agent_process.store import ConversationStore
from agent_process.telemetry import EventBus
from agent_process.tool_loader import load_tool_resource
from agent_process.toolcall import ToolCallRunner
from agent_process.turn import TurnDeps, TurnEngine
from bundles.model import Bundle
from bundles.sdk import AgentsRuntime
from protocol.endpoints import InstancePaths, StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent
from protocol.messages import TurnOutcome

__all__ = ["AgentRuntime", "StartFailure", "TurnResult"]

_log = structlog.get_logger("goondan.runtime")


class StartFailure(Exception):
    """A coded reason the agent cannot start (E_TOOL_LOAD, E_EXT_*, E_CONFIG_*, E_MODEL_*)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class AgentRuntime:
    """One agent instance: model, tools, extensions, pipelines, conversation, runtime events."""

    def __init__(
        self,
        *,
        engine: TurnEngine,
        model: Model,
        registry: ToolRegistry,
        store: ConversationStore,
        bus: EventBus,
        extensions: list[ExtensionHandle],
        paths: InstancePaths,
        tool_calls: ToolCallRunner,
    ) -> None:
        self._engine = engine
        self.model = model
        self.registry = registry
        self.store = store
        self.bus = bus
        self.extensions = extensions
        self.paths = paths
        self.tool_calls = tool_calls
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def tool_names(self) -> list[str]:
        """Registry names, for the `ready` frame."""
        return self.registry.names

    @property
    def recovered_events(self) -> int:
        """Message events replayed from a previous process's unfolded log."""
        return self.store.recovered_events

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
    ) -> AgentRuntime:
        """Load model, tools and extensions and replay the conversation; raise StartFailure."""
        paths = layout.instance_paths(swarm, instance_key, agent)
        try:
            return await _build(
                cls, bundle, agent, instance_key, swarm, layout, paths, agents, workdir
            )
        except resolve.ConfigProblem as exc:
            raise StartFailure(exc.info) from exc
        except ModelError as exc:
            raise StartFailure(exc.info) from exc
        except ToolRegistryError as exc:
            raise StartFailure(ErrorInfo(code=exc.code.value, message=exc.message)) from exc
        except ExtensionFailure as exc:
            raise StartFailure(
                ErrorInfo(code=exc.code.value, message=exc.message, suggestion=exc.suggestion)
            ) from exc

    async def run_turn(self, event: AgentEvent) -> TurnResult:
        """One turn; never raises for a failed turn (outcome FAILED with a coded error)."""
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
            return await self._engine.run(event)

    async def close(self) -> None:
        """Fold the log, save extension state, flush events, close the model client."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            _save_states(self.extensions)
            self.store.close()
            await self.bus.drain()
            self.bus.close()
            await self.model.aclose()


def _save_states(extensions: list[ExtensionHandle]) -> None:
    for ext in extensions:
        try:
            ext.state.save()
        except OSError as exc:
            _log.error("extension_state_save_failed", extension=ext.name, error=str(exc))


async def _build(
    cls: type[AgentRuntime],
    bundle: Bundle,
    agent_name: str,
    instance_key: str,
    swarm: str,
    layout: StateLayout,
    paths: InstancePaths,
    agents: AgentsRuntime | None,
    workdir: Path | None,
) -> AgentRuntime:
    agent = resolve.agent(bundle, agent_name)
    model_res = resolve.model(bundle, agent)
    system_prompt = resolve.system_prompt(bundle, agent)
    policy = resolve.swarm_policy(bundle, swarm)
    tool_entries: list[list[ToolEntry]] = [
        list(load_tool_resource(t)) for t in resolve.tools(bundle, agent)
    ]
    for directory in (paths.messages_dir, paths.extensions_dir):
        directory.mkdir(parents=True, exist_ok=True)
    work = workdir if workdir is not None else paths.workdir
    work.mkdir(parents=True, exist_ok=True)
    logger = agent_logger(agent_name, instance_key)
    bus = EventBus(paths.runtime_events_jsonl, agent=agent_name, instance_key=instance_key)
    pipelines = Pipelines()
    extensions = [
        await load_extension(
            ext,
            pipelines=pipelines,
            bus=bus,
            state_path=paths.extension_state(ext.name),
            logger=logger,
        )
        for ext in resolve.extensions(bundle, agent)
    ]
    registry = ToolRegistry.build([*tool_entries, *(e.tool_entries() for e in extensions)])
    model = create_model(model_res, api_key=resolve.api_key(bundle, model_res, layout.root))
    store = ConversationStore(paths.messages_dir)
    store.open()
    bus.open()
    tool_calls = ToolCallRunner(
        registry=registry,
        pipelines=pipelines,
        bus=bus,
        workdir=work,
        logger=logger,
        runtime=agents if agents is not None else NotConnectedRuntime(),
        secret_values=bundle.secret_values,
    )

    def at_turn_end() -> None:
        store.fold()
        _save_states(extensions)
        bus.flush()

    engine = TurnEngine(
        TurnDeps(
            agent_name=agent_name,
            instance_key=instance_key,
            model=model,
            model_params=dict(agent.spec.model_config.params),
            system_prompt=system_prompt,
            max_steps=policy.max_steps_per_turn,
            catalog=CatalogBuilder(registry),
            pipelines=pipelines,
            store=store,
            bus=bus,
            tool_calls=tool_calls,
            at_turn_end=at_turn_end,
        )
    )
    return cls(
        engine=engine,
        model=model,
        registry=registry,
        store=store,
        bus=bus,
        extensions=extensions,
        paths=paths,
        tool_calls=tool_calls,
    )
