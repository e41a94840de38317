"""What a case's turns did, read from its instance's conversation on disk (the same files
`goondan instance show` reads): the tools called, the model steps per turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.observe.conversations import InstanceConversation, NoSuchInstance
from protocol.conversation import Role
from protocol.endpoints import StateLayout


@dataclass(frozen=True, slots=True)
class Trail:
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    max_steps: int = 0
    """The most assistant messages (model steps) any one input of the case took."""


def read_trail(layout: StateLayout, swarm: str, key: str) -> Trail:
    """Every agent of the instance (a hand-off's callee included); an instance with no
    conversation (its turn failed before one was written) has an empty trail."""
    try:
        lines = InstanceConversation(layout, swarm, key, None).poll()
    except NoSuchInstance:
        return Trail()
    calls: list[tuple[str, dict[str, Any]]] = []
    steps, most = 0, 0
    for line in lines:
        message = line.message
        if message.role is Role.USER:
            steps = 0
        elif message.role is Role.ASSISTANT:
            steps += 1
            most = max(most, steps)
            calls += [(call.name, dict(call.args)) for call in message.tool_calls]
    return Trail(tool_calls=tuple(calls), max_steps=most)
