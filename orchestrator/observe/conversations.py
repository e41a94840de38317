"""One instance's conversation as the operator reads it: `goondan instance show` and Studio.

Files only (`protocol.transcript` folds base + events of each agent of the instance), so it
works with or without a daemon. An instance with several agents (a key shared by agents that
talk to each other) is shown merged by time, each line naming its agent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from orchestrator.control import localstate
from orchestrator.observe.logview import clock
from protocol.conversation import Message, Role
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.transcript import ConversationReader

CONTENT_PREVIEW = 2000
"""Characters of a tool result shown in text mode (the JSON has it whole)."""


class NoSuchInstance(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True, slots=True)
class Line:
    """One message of one agent, with what a reader needs beside it."""

    agent: str
    instance_key: str
    message: Message
    trace_id: str | None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"agent": self.agent, "instanceKey": self.instance_key}
        data.update(msgspec.to_builtins(self.message))
        if self.trace_id is not None:
            data["traceId"] = self.trace_id
        return data


class InstanceConversation:
    """The readers of every agent of one instance (or of one agent with `agent`)."""

    def __init__(self, layout: StateLayout, swarm: str, key: str, agent: str | None) -> None:
        rows = [r for r in localstate.instances(layout, swarm) if r["instanceKey"] == key]
        agents = sorted({str(r["agent"]) for r in rows})
        if not rows:
            raise NoSuchInstance(_missing(f"swarm {swarm!r} has no instance {key!r}",
                                          localstate.instances(layout, swarm)))  # fmt: skip
        if agent is not None and agent not in agents:
            raise NoSuchInstance(_missing(f"instance {key!r} has no agent {agent!r} "
                                          f"(it has: {', '.join(agents)})", []))  # fmt: skip
        self.swarm = swarm
        self.key = key
        self.readers = {
            str(r["agent"]): ConversationReader(Path(str(r["path"])) / "messages")
            for r in rows
            if agent is None or r["agent"] == agent
        }
        self.agent_width = max(map(len, self.readers)) if len(self.readers) > 1 else 0

    def poll(self) -> list[Line]:
        """The messages added since the last poll (all of them the first time), by time."""
        lines = []
        for agent, reader in self.readers.items():
            change = reader.poll()
            if change is None:
                continue
            lines += [Line(agent, self.key, m, reader.trace_of(m)) for m in change.added]
        lines.sort(key=lambda line: line.message.created_at)
        return lines

    def messages(self) -> list[Line]:
        """Every message as of the last poll, by time."""
        lines = [
            Line(agent, self.key, m, reader.trace_of(m))
            for agent, reader in self.readers.items()
            for m in reader.messages
        ]
        lines.sort(key=lambda line: line.message.created_at)
        return lines

    @property
    def bad_lines(self) -> int:
        return sum(r.bad_lines for r in self.readers.values())


def _missing(message: str, rows: list[Any]) -> ErrorInfo:
    keys = sorted({str(r["instanceKey"]) for r in rows})
    known = f"; instances: {', '.join(keys[:20])}" if keys else ""
    return ErrorInfo(code=ErrorCode.E_INSTANCE_NOT_FOUND, message=message + known,
                     suggestion="see goondan instance list")  # fmt: skip


class TextRenderer:
    """Readable lines: a header when a new turn starts, then one entry per message."""

    def __init__(self, *, agent_width: int = 0) -> None:
        self.agent_width = agent_width
        """Width of the agent column (0: none, one agent)."""
        self._turn: str | None = None

    def render(self, line: Line) -> Iterator[str]:
        msg = line.message
        if msg.turn_id is not None and msg.turn_id != self._turn:
            self._turn = msg.turn_id
            trace = f" · trace {line.trace_id[:8]}" if line.trace_id else ""
            yield f"── turn {msg.turn_id}{trace}"
        who = f"{line.agent:<{self.agent_width}} " if self.agent_width else ""
        head = f"{clock(msg.created_at)} {who}{msg.role.value:<9}"
        yield from _indented(head, _body(msg))


def _body(msg: Message) -> str:
    if msg.role is Role.TOOL:
        status = msg.metadata.get("status", "?")
        content = msg.content
        if len(content) > CONTENT_PREVIEW:
            content = content[:CONTENT_PREVIEW] + f"… ({len(msg.content)} characters)"
        return f"{msg.tool_name or '?'} [{status}] {content}"
    parts = [msg.content] if msg.content else []
    for call in msg.tool_calls:
        args = call.invalid_args or json.dumps(call.args, ensure_ascii=False)
        parts.append(f"→ {call.name} {args}")
    if msg.role is Role.USER and msg.metadata.get("inReplyTo"):
        parts.insert(0, "(reply from another agent)")
    return "\n".join(parts)


def _indented(head: str, body: str) -> Iterator[str]:
    first, *rest = body.split("\n") or [""]
    yield f"{head} {first}".rstrip()
    pad = " " * (len(head) + 1)
    for more in rest:
        yield pad + more
