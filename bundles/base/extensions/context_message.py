"""`context-message`: tell the model who it is, who it can talk to and where the input came from.

At the first step of every turn the extension adds one system message to the conversation,
right after the turn's input, and removes the one it added in the previous turn (so the
history holds only the current one; message-window and message-compaction keep system
messages). Its sections, each switched by a setting:
- `prompt` (text, default none): extra instructions, e.g. a house style shared by agents;
  the agent's own `prompt.system` is already sent by the runtime on every step;
- `includeAgent` (default true): the agent's name and instance key;
- `agents` (default none): the swarm catalog to show, a list of names or `{name,
  description}` (extensions have no orchestrator link; the `agents` tool's `catalog` export
  gives the live list);
- `includeInbound` (default true): the inbound event's type, source (kind, name, instance,
  properties such as a Telegram chat id), whether a reply is awaited, and its metadata, as
  JSON cut at `maxMetadataChars` (default 2000);
- `includeTime` (default false): the current UTC time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from bundles.sdk import Conversation, ExtensionApi, StepMiddlewareContext, TurnMiddlewareContext

HEADER = "[context]"


class Settings:
    __slots__ = (
        "agents",
        "include_agent",
        "include_inbound",
        "include_time",
        "max_metadata_chars",
        "prompt",
    )

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.prompt = str(config.get("prompt") or "").strip()
        self.include_agent = bool(config.get("includeAgent", True))
        self.include_inbound = bool(config.get("includeInbound", True))
        self.include_time = bool(config.get("includeTime", False))
        self.max_metadata_chars = int(config.get("maxMetadataChars", 2000))
        agents = config.get("agents", [])
        if not isinstance(agents, list) or not all(
            isinstance(a, str) or (isinstance(a, Mapping) and isinstance(a.get("name"), str))
            for a in agents
        ):
            raise ValueError("config agents must be a list of names or {name, description}")
        self.agents: list[Any] = agents


def _json(value: Any, limit: int) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "...(cut)"


def _inbound(event: Any, limit: int) -> list[str]:
    source = event.source
    kind = getattr(source.kind, "value", source.kind)
    where = f"{kind}/{source.name}" + (
        f" (instance {source.instance_key})" if source.instance_key else ""
    )
    lines = [f"Inbound event: type {event.type} from {where}."]
    if source.properties:
        lines.append(f"Source properties: {_json(source.properties, limit)}")
    if event.reply_to is not None:
        lines.append(
            f"A reply is awaited by {event.reply_to.target}: your final answer is sent there."
        )
    if event.metadata:
        lines.append(f"Event metadata: {_json(event.metadata, limit)}")
    return lines


def _agents(agents: list[Any]) -> list[str]:
    lines = ["Agents in this swarm (reach them with the agents tool):"]
    for agent in agents:
        if isinstance(agent, str):
            lines.append(f"- {agent}")
        else:
            description = str(agent.get("description") or "").strip()
            lines.append(f"- {agent['name']}" + (f": {description}" if description else ""))
    return lines


def render(settings: Settings, turn: TurnMiddlewareContext) -> str:
    """The context message's text for this turn (pure apart from the clock)."""
    sections: list[list[str]] = []
    if settings.prompt:
        sections.append([settings.prompt])
    if settings.include_agent:
        sections.append([f"You are agent {turn.agent_name} (instance {turn.instance_key})."])
    if settings.agents:
        sections.append(_agents(settings.agents))
    if settings.include_inbound:
        sections.append(_inbound(turn.event, settings.max_metadata_chars))
    if settings.include_time:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        sections.append([f"Current time (UTC): {now}."])
    return "\n\n".join([HEADER, *("\n".join(section) for section in sections)])


def _replace_previous(conversation: Conversation, owner: str) -> None:
    for message in list(conversation.messages):
        if (getattr(message, "metadata", None) or {}).get("extension") == owner:
            conversation.remove(message.id)


def register(api: ExtensionApi, config: Mapping[str, Any]) -> None:
    settings = Settings(config)

    async def step(ctx: StepMiddlewareContext) -> Any:
        if ctx.index == 1:  # after the turn appended its input (and answered interrupted calls)
            conversation = ctx.turn.conversation
            _replace_previous(conversation, api.name)
            conversation.append(
                "system", render(settings, ctx.turn), metadata={"extension": api.name}
            )
        return await ctx.next()

    api.pipeline.register("step", step)
