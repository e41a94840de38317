"""The ToolContext of one call (minimal, ARCHITECTURE.md §6), and `NotConnectedRuntime`: the
`runtime` of a process with no orchestrator link, where every agents call is a coded error.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bundles.sdk import AgentsRuntime, JsonObject, Logger, ToolFailed
from protocol.conversation import Message
from protocol.errors import ErrorCode


class ToolCallContext:
    """Implements `bundles.sdk.ToolContext` for one call.

    `logger` and `message` are built on first access: most handlers never touch them, and the
    tool-call hot path should not pay for a structlog bind or a dict conversion it does not use.
    """

    __slots__ = (
        "_base_logger",
        "_logger",
        "_message",
        "_message_dict",
        "agent_name",
        "config",
        "instance_key",
        "runtime",
        "secret_values",
        "tool_call_id",
        "tool_name",
        "trace_id",
        "workdir",
    )

    def __init__(
        self,
        *,
        workdir: Path,
        base_logger: Any,
        runtime: AgentsRuntime,
        message: Message,
        tool_call_id: str,
        tool_name: str,
        agent_name: str,
        instance_key: str,
        trace_id: str,
        config: Mapping[str, Any],
        secret_values: frozenset[str],
    ) -> None:
        self.workdir = workdir
        self._base_logger = base_logger
        self._logger: Logger | None = None
        self.runtime = runtime
        self._message = message
        self._message_dict: Mapping[str, Any] | None = None
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.trace_id = trace_id
        self.config = config
        self.secret_values = secret_values

    @property
    def logger(self) -> Logger:
        if self._logger is None:
            self._logger = self._base_logger.bind(
                trace_id=self.trace_id, tool=self.tool_name, tool_call_id=self.tool_call_id
            )
        return self._logger

    @property
    def message(self) -> Mapping[str, Any]:
        if self._message_dict is None:
            self._message_dict = msgspec.to_builtins(self._message)
        return self._message_dict


def agent_logger(agent: str, instance_key: str) -> Any:
    """The structlog logger of one agent instance (tool contexts bind trace and call on it)."""
    # bound lazily (initial values of the proxy): built on the first log call, not at start,
    # so an idle agent never runs structlog's logger construction
    return structlog.get_logger("goondan.agent", agent=agent, instance_key=instance_key)


class NotConnectedRuntime:
    """`ctx.runtime` when the process has no orchestrator link: every call is a coded error."""

    def _fail(self, op: str) -> ToolFailed:
        return ToolFailed(
            f"agents.{op} is unavailable: this agent process is not connected to an orchestrator",
            code=ErrorCode.E_AGENT_NOT_CONNECTED,
            suggestion="run the agent under `goondan run` to talk to other agents",
        )

    async def request(self, target: str, input: str, **kw: Any) -> JsonObject:
        raise self._fail("request")

    async def send(self, target: str, input: str, **kw: Any) -> JsonObject:
        raise self._fail("send")

    async def spawn(self, target: str, **kw: Any) -> JsonObject:
        raise self._fail("spawn")

    async def list(self, **kw: Any) -> JsonObject:
        raise self._fail("list")

    async def catalog(self) -> JsonObject:
        raise self._fail("catalog")

    async def restart(self, reason: str) -> JsonObject:
        raise self._fail("restart")
