"""Shared helpers for the runtime tests: create a runtime from in-memory resources, run turns."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_process.models.scripted import ScriptedModel
from agent_process.runtime import AgentRuntime, TurnResult
from bundles.model import Bundle, Resource
from protocol.conversation import Role
from protocol.endpoints import StateLayout
from protocol.events import AgentEvent, Source, SourceKind, new_event
from protocol.launch import LaunchSettings
from tests.unit.agent_process import builders

TIMEOUT = 20


async def make_runtime(
    *resources: Resource[Any], agent: str = "a", instance: str = "k1", swarm: str = "s"
) -> AgentRuntime:
    async with asyncio.timeout(TIMEOUT):
        return await AgentRuntime.create(
            bundle=builders.bundle(*resources),
            agent=agent,
            instance_key=instance,
            swarm=swarm,
            layout=StateLayout.from_env(),
        )


def event(text: str, instance: str = "k1") -> AgentEvent:
    return new_event(
        type="user.input",
        input=text,
        instance_key=instance,
        source=Source(kind=SourceKind.CLI, name="cli"),
    )


async def turn(runtime: AgentRuntime, text: str) -> TurnResult:
    async with asyncio.timeout(TIMEOUT):
        return await runtime.run_turn(event(text))


def tool_results(runtime: AgentRuntime) -> list[dict[str, Any]]:
    """The tool messages of the conversation, decoded (what the model received)."""
    return [json.loads(m.content) for m in runtime.store.messages if m.role is Role.TOOL]


def scripted(runtime: AgentRuntime) -> ScriptedModel:
    model = getattr(runtime.model, "inner", runtime.model)  # under its models/governed.py wrapper
    assert isinstance(model, ScriptedModel)
    return model


def launch_for(
    bundle: Bundle, state_root: Path, env_files: tuple[Path, ...] = (), swarm: str = "s"
) -> LaunchSettings:
    """The launch settings a daemon of `bundle` would start its children with (the fork
    server holds its bundle for these)."""
    return LaunchSettings(
        endpoint="ipc:///nonexistent/agents.sock", swarm=swarm, bundle=str(bundle.path),
        state_root=str(state_root), env_files=tuple(map(str, env_files)),
    )  # fmt: skip
