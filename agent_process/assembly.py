"""The composition root of one agent runtime: resolve, load and wire the parts, in order.

Order matters: tools are loaded before extensions (a broken Tool fails fast), the runtime-event
bus opens before extensions register (they may emit or subscribe at once), the registry is
built once every source has registered, and the conversation log is replayed last.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from agent_process import resolve, sandboxing, secretenv
from agent_process.approvals import Approval, approvals_of
from agent_process.catalog import CatalogBuilder
from agent_process.extensions import ExtensionHandle, load_extension
from agent_process.inbox import Inbox
from agent_process.mcp import McpBridge
from agent_process.meter import Meter
from agent_process.models import Model, create_model, recording
from agent_process.models.fallback import FallbackChain
from agent_process.models.governed import Governed, PermitDesk
from agent_process.pipeline import Pipelines
from agent_process.registry import ToolEntry, ToolRegistry
from agent_process.store import ConversationStore
from agent_process.telemetry import EventBus
from agent_process.tool_context import NotConnectedRuntime, agent_logger
from agent_process.tool_loader import load_tool_resource
from agent_process.toolcall import ToolCallRunner
from agent_process.turn import TurnDeps, TurnEngine
from bundles.kinds import AgentSpec, ToolSpec
from bundles.model import Bundle, Resource
from bundles.sdk import AgentsRuntime
from protocol.endpoints import InstancePaths, StateLayout

_log = structlog.get_logger("goondan.runtime")


@dataclass(frozen=True, slots=True)
class StartRequest:
    bundle: Bundle
    agent: str
    instance_key: str
    swarm: str
    layout: StateLayout
    agents: AgentsRuntime | None
    workdir: Path | None
    sink: int | None = None
    """An open fd the conversation and the runtime events go to instead of the instance's
    files: nothing is created on disk and the conversation lives in memory only (the fork
    server's rehearsal, with /dev/null)."""
    env_files: tuple[Path, ...] = ()
    """The run's `--env-file`s: hidden from sandboxed tools like the bundle's own `.env`."""

    @property
    def paths(self) -> InstancePaths:
        return self.layout.instance_paths(self.swarm, self.instance_key, self.agent)


@dataclass(slots=True)
class Parts:
    engine: TurnEngine
    model: Model
    registry: ToolRegistry
    store: ConversationStore
    bus: EventBus
    extensions: list[ExtensionHandle]
    paths: InstancePaths
    tool_calls: ToolCallRunner
    mcp: McpBridge
    meter: Meter


def save_states(extensions: list[ExtensionHandle]) -> None:
    for ext in extensions:
        try:
            ext.state.save()
        except OSError as exc:
            _log.error("extension_state_save_failed", extension=ext.name, error=str(exc))


async def assemble(req: StartRequest) -> Parts:
    """Raises resolve.ConfigProblem, ModelError, ToolRegistryError or ExtensionFailure.

    MCP servers start after the local tools loaded and are closed again if anything later fails.
    """
    agent = resolve.agent(req.bundle, req.agent)
    tools = resolve.tools(req.bundle, agent)
    hide = sandboxing.hidden_paths(req.bundle, req.layout, req.env_files)
    tool_entries = [_with_credentials(req, t, list(load_tool_resource(t)), hide) for t in tools]
    servers: list[Resource[Any]] = [*tools, *resolve.extensions(req.bundle, agent)]
    mcp = await McpBridge.start(req.bundle, servers, state_root=req.layout.root)
    try:
        for entries, tool in zip(tool_entries, tools, strict=True):
            entries.extend(mcp.entries("Tool", tool.name))
        return await _assemble(req, agent, tool_entries, mcp, approvals_of(tools))
    except BaseException:
        await mcp.close()
        raise


def _with_credentials(
    req: StartRequest, tool: Resource[ToolSpec], entries: list[ToolEntry], hide: list[str]
) -> list[ToolEntry]:
    """The Tool's credentials are read now, once (`secretenv.tool_config`), and its sandbox
    with what it hides (`sandboxing.tool_config`)."""
    config = secretenv.tool_config(req.bundle, tool.spec.config, req.layout.root)
    config = sandboxing.tool_config(tool, config, hide)
    return [replace(entry, config=config) for entry in entries]


async def _assemble(
    req: StartRequest,
    agent: Resource[AgentSpec],
    tool_entries: list[list[ToolEntry]],
    mcp: McpBridge,
    approval_rules: dict[str, Approval],
) -> Parts:
    paths = req.paths
    # only the conversation's directory, made by the event bus's open (its file is there):
    # extension state and the workdir are made when first written (at a million hibernated
    # instances, empty directories are 4 KiB each)
    logger = agent_logger(req.agent, req.instance_key)
    bus = EventBus(
        paths.runtime_events_jsonl, agent=req.agent, instance_key=req.instance_key, sink=req.sink
    )
    bus.open()  # before the extensions: their register() may already emit events
    pipelines = Pipelines()
    try:
        extensions = await _load_extensions(req, agent, pipelines, bus, logger)
        ext_entries = [[*e.tool_entries(), *mcp.entries("Extension", e.name)] for e in extensions]
        registry = ToolRegistry.build([*tool_entries, *ext_entries])
        model = _model(req, agent, bus)
    except BaseException:
        bus.close()
        raise
    meter = Meter(model.name)  # the primary Model's `spec.model`
    if req.sink is None:  # the fork server's rehearsal reports to no daemon
        bus.meter = meter.observe
    store = ConversationStore(paths.messages_dir, sink=req.sink)
    store.open()
    tool_calls = _tool_calls(req, registry, pipelines, bus, logger, approval_rules)
    engine = TurnEngine(
        TurnDeps(
            agent_name=req.agent,
            instance_key=req.instance_key,
            model=model,
            model_params=dict(agent.spec.model_config.params),
            system_prompt=resolve.system_prompt(req.bundle, agent),
            max_steps=resolve.swarm_policy(req.bundle, req.swarm).max_steps_per_turn,
            catalog=CatalogBuilder(registry),
            pipelines=pipelines,
            store=store,
            bus=bus,
            tool_calls=tool_calls,
            at_turn_end=lambda: _turn_end(store, extensions, bus),
            inbox=Inbox(paths.inbox_dir),
            agents=req.agents,
        )
    )
    return Parts(engine, model, registry, store, bus, extensions, paths, tool_calls, mcp, meter)


def _model(req: StartRequest, agent: Resource[AgentSpec], bus: EventBus) -> Model:
    """The agent's Model and its fallbacks, each metered by the orchestrator (models/governed.py:
    permits when a budget or a rate limit applies, usage always)."""
    desk = req.agents if isinstance(req.agents, PermitDesk) else None
    budgeted = agent.spec.policy.budget is not None
    budgeted = budgeted or resolve.swarm_policy(req.bundle, req.swarm).budget is not None
    # the fork server's rehearsal has no daemon to grant permits (nor an event loop to wait
    # for one): its turns ask none, whatever the bundle limits
    governed = req.sink is None
    links = []
    for res in resolve.model_chain(req.bundle, agent):
        key = None if recording.replays(res) else resolve.api_key(req.bundle, res, req.layout.root)
        inner = create_model(res, api_key=key, agent=agent.name, recorded=req.sink is None)
        asks = governed and (budgeted or res.spec.rate_limit is not None)
        links.append(Governed(inner, resource=res.name, pricing=res.spec.pricing, desk=desk,
                              asks=asks, record=bus.record))  # fmt: skip
    return links[0] if len(links) == 1 else FallbackChain(links, bus.record)


def _turn_end(store: ConversationStore, extensions: list[ExtensionHandle], bus: EventBus) -> None:
    store.fold()
    save_states(extensions)
    bus.flush()


async def _load_extensions(
    req: StartRequest,
    agent: Resource[AgentSpec],
    pipelines: Pipelines,
    bus: EventBus,
    logger: Any,
) -> list[ExtensionHandle]:
    return [
        await load_extension(
            ext,
            pipelines=pipelines,
            bus=bus,
            state_path=req.paths.extension_state(ext.name),
            logger=logger,
        )
        for ext in resolve.extensions(req.bundle, agent)
    ]


def _tool_calls(
    req: StartRequest,
    registry: ToolRegistry,
    pipelines: Pipelines,
    bus: EventBus,
    logger: Any,
    approval_rules: dict[str, Approval],
) -> ToolCallRunner:
    workdir = req.workdir if req.workdir is not None else req.paths.workdir
    return ToolCallRunner(
        registry=registry,
        pipelines=pipelines,
        bus=bus,
        workdir=workdir,
        logger=logger,
        runtime=req.agents if req.agents is not None else NotConnectedRuntime(),
        secret_values=req.bundle.secret_values,
        default_timeout_ms=resolve.swarm_policy(req.bundle, req.swarm).tools.default_timeout_ms,
        make_workdir=req.sink is None,
        approval_rules=approval_rules,
        limits=resolve.limits(req.bundle, req.agent),
    )
