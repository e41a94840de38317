"""What the agent process needs to run one MCP server: resolved from a Tool or Extension resource.

ValueSources in `env` and `headers` are resolved here (secrets never appear in the bundle), a
relative command with a `/` is made relative to the bundle's root (the server's working
directory), and a Tool's `exports` become the allow-list of MCP tool names.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_process.registry import ToolRegistryError
from bundles import values
from bundles.diagnostics import BundleError
from bundles.kinds import Kind, McpServer, ToolExport, ValueSource
from bundles.model import Bundle, Resource
from protocol.errors import ErrorCode


class McpStartError(ToolRegistryError):
    """A coded reason an MCP server cannot be used at start; AgentRuntime.create turns it into
    a StartFailure like any other tool load error."""

    def __init__(self, message: str, code: ErrorCode, suggestion: str | None = None) -> None:
        super().__init__(message, code)
        self.suggestion = suggestion


@dataclass(frozen=True, slots=True)
class ServerConfig:
    owner: str
    """The Tool or Extension resource name: the `<owner>__` prefix of every tool."""
    kind: str
    """`Tool` or `Extension`."""
    where: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cwd: Path = field(default_factory=Path)
    timeout_ms: int = 30_000
    required: bool = True
    exports: dict[str, ToolExport] = field(default_factory=dict)
    """The allow-list (a Tool's `spec.exports`), by MCP tool name; empty means all tools."""
    error_message_limit: int = 1000

    @property
    def target(self) -> str:
        """The command line or the URL, for messages (no env, no headers: they may be secret)."""
        if self.url is not None:
            return self.url
        return shlex.join([self.command or "", *self.args])

    def describe(self) -> str:
        return f"{self.kind} {self.owner!r} (MCP server `{self.target}`, {self.where})"


def server_config(
    bundle: Bundle, resource: Resource[Any], *, state_root: Path | None = None
) -> ServerConfig:
    """The config of the resource's `spec.mcp`; raises McpStartError for a missing secret."""
    mcp: McpServer = resource.spec.mcp
    label = f"{resource.kind.value}/{resource.name} spec.mcp"
    is_tool = resource.kind is Kind.TOOL
    exports = {e.name: e for e in resource.spec.exports if e.deferred is None} if is_tool else {}
    return ServerConfig(
        owner=resource.name,
        kind=resource.kind.value,
        where=str(resource.location),
        command=_command(mcp.command, resource.root),
        args=tuple(mcp.args),
        env=_resolve_all(bundle, mcp.env, f"{label}.env", state_root),
        url=mcp.url,
        headers=_resolve_all(bundle, mcp.headers, f"{label}.headers", state_root),
        cwd=resource.root,
        timeout_ms=mcp.timeout_ms,
        required=mcp.required,
        exports=exports,
        error_message_limit=resource.spec.error_message_limit if is_tool else 1000,
    )


def _command(command: str | None, root: Path) -> str | None:
    # `./server.py` means the bundle's file; `python` or `npx` is looked up on PATH.
    if command is None or "/" not in command or Path(command).is_absolute():
        return command
    return str(root / command)


def _resolve_all(
    bundle: Bundle,
    raw: dict[str, str | ValueSource],
    where: str,
    state_root: Path | None,
) -> dict[str, str]:
    resolved: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            resolved[key] = value
            continue
        try:
            resolved[key] = values.resolve_value(
                bundle, value, state_root=state_root, where=f"{where}.{key}"
            )
        except BundleError as exc:
            first = exc.diagnostics[0] if exc.diagnostics else None
            message = f"{first.path}: {first.message}" if first else str(exc)
            raise McpStartError(
                message, ErrorCode.E_CONFIG_VALUE_SOURCE, first.suggestion if first else None
            ) from None
    return resolved
