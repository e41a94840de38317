"""All MCP servers of one agent: started together at process start, closed with the runtime.

Servers start concurrently. A server that fails to start is a coded StartFailure (E_TOOL_MCP,
naming the resource and the command) unless its `spec.mcp.required` is false, in which case the
agent starts without that server's tools and a warning says why. Entries are grouped by owner so
the assembly can keep `Agent.spec.tools` order in the registry.

The SDK (a large import) is imported only when some resource declares a server, so
agents without MCP tools start as fast as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agent_process.mcp.config import McpStartError, ServerConfig, server_config
from agent_process.registry import ToolEntry
from bundles.model import Bundle, Resource

if TYPE_CHECKING:
    from agent_process.mcp.connection import Backoff, McpConnection

_log = structlog.get_logger("goondan.mcp")


class McpBridge:
    __slots__ = ("_connections", "_entries")

    def __init__(self) -> None:
        self._connections: dict[str, McpConnection] = {}
        self._entries: dict[str, list[ToolEntry]] = {}

    @classmethod
    async def start(
        cls,
        bundle: Bundle,
        resources: Iterable[Resource[Any]],
        *,
        state_root: Path | None = None,
        backoff: Backoff | None = None,
    ) -> McpBridge:
        """Connect to the `spec.mcp` server of every resource that declares one."""
        bridge = cls()
        configs = [
            server_config(bundle, r, state_root=state_root)
            for r in resources
            if getattr(r.spec, "mcp", None) is not None
        ]
        if not configs:
            return bridge
        from agent_process.mcp.connection import McpConnection  # the SDK: only when used

        connections = [McpConnection(cfg, backoff) for cfg in configs]
        outcomes = await asyncio.gather(*(c.start() for c in connections), return_exceptions=True)
        try:
            for conn, outcome in zip(connections, outcomes, strict=True):
                bridge._adopt(conn, outcome)
        except BaseException:
            await asyncio.gather(*(c.close() for c in connections))
            raise
        return bridge

    def _adopt(self, conn: McpConnection, outcome: BaseException | None) -> None:
        cfg = conn.cfg
        if isinstance(outcome, McpStartError) and not cfg.required:
            _log.warning("mcp_server_skipped", server=cfg.describe(), error=outcome.message)
            return
        if outcome is not None:
            raise outcome
        from agent_process.mcp.tools import build_entries

        self._connections[self._key(cfg)] = conn
        self._entries[self._key(cfg)] = build_entries(cfg, conn.tools, conn.call)

    @staticmethod
    def _key(cfg: ServerConfig) -> str:
        return f"{cfg.kind}/{cfg.owner}"

    def entries(self, kind: str, owner: str) -> list[ToolEntry]:
        """Registry entries of the server of `Tool`/`Extension` `owner` (none if it has none)."""
        return list(self._entries.get(f"{kind}/{owner}", ()))

    def connection(self, kind: str, owner: str) -> McpConnection:
        return self._connections[f"{kind}/{owner}"]

    @property
    def connections(self) -> list[McpConnection]:
        return list(self._connections.values())

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections))
