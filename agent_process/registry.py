"""The tool registry: every executable tool of this process, keyed by `<resource>__<export>`.

Entries come from small composable toolsets (see `toolsets.py`): a Tool resource's exports, an
extension's `api.tools.register(...)` calls, an MCP server's tools (`agent_process.mcp`).
`ToolRegistry.build()` combines them and refuses a name clash with an error that names both
sources and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent_process.schema import ArgsValidator, SchemaInvalid
from protocol.errors import ErrorCode

NAME_PART = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
MAX_TOOL_NAME = 64
SEPARATOR = "__"


class SourceKind(StrEnum):
    CONFIG = "config"
    EXTENSION = "extension"
    MCP = "mcp"


@dataclass(frozen=True, slots=True)
class ToolOrigin:
    """Where a tool came from, for catalog items, errors and logs."""

    kind: SourceKind
    name: str
    """The Tool resource, extension or MCP server name."""
    where: str = ""
    """A file:line or module path, when known."""

    def describe(self) -> str:
        label = {"config": "Tool", "extension": "Extension", "mcp": "MCP server"}[self.kind]
        return f"{label} {self.name!r}" + (f" ({self.where})" if self.where else "")


@dataclass(slots=True)
class ToolEntry:
    """One executable tool. `name` is the full model-facing name once prefixed."""

    name: str
    handler: Callable[..., Any]
    is_async: bool
    origin: ToolOrigin
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout_ms: int | None = None
    error_message_limit: int = 1000
    result_limit: int = 100_000
    config: dict[str, Any] = field(default_factory=dict)
    visible: bool = True
    """In the default catalog of every step; hidden tools can be added by step middleware."""
    validator: ArgsValidator | None = None
    idempotent: bool = False
    """A call cut by a crash may run again when its turn resumes (ToolExport.idempotent)."""


class ToolRegistryError(Exception):
    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def check_name_part(part: str, what: str, origin: ToolOrigin) -> None:
    if SEPARATOR in part or not NAME_PART.match(part):
        raise ToolRegistryError(
            f"{origin.describe()}: {what} {part!r} must match ^[A-Za-z][A-Za-z0-9_-]*$ "
            f"and must not contain '__'; rename it",
            ErrorCode.E_TOOL_LOAD,
        )


class ToolRegistry:
    """Name -> entry, in declaration order (Agent.spec.tools, then extensions)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, ToolEntry] = {}

    @classmethod
    def build(cls, toolsets: Iterable[Iterable[ToolEntry]]) -> ToolRegistry:
        registry = cls()
        for toolset in toolsets:
            registry.add_all(toolset)
        return registry

    def add_all(self, entries: Iterable[ToolEntry]) -> None:
        for entry in entries:
            self.add(entry)

    def add(self, entry: ToolEntry) -> None:
        if len(entry.name) > MAX_TOOL_NAME:
            raise ToolRegistryError(
                f"{entry.origin.describe()}: tool name {entry.name!r} is {len(entry.name)} "
                f"characters, over the {MAX_TOOL_NAME} that model providers accept; "
                "shorten the resource or export name",
                ErrorCode.E_TOOL_LOAD,
            )
        existing = self._entries.get(entry.name)
        if existing is not None:
            raise ToolRegistryError(
                f"tool name {entry.name!r} is defined twice: by {existing.origin.describe()} "
                f"and by {entry.origin.describe()}; rename one of them (the Tool resource, "
                "the extension, or the export/registered name)",
                ErrorCode.E_TOOL_NAME_CONFLICT,
            )
        if entry.validator is None:
            try:
                entry.validator = ArgsValidator(entry.name, entry.parameters)
            except SchemaInvalid as exc:
                raise ToolRegistryError(
                    f"{entry.origin.describe()}: tool {entry.name!r}: {exc}; fix the schema",
                    ErrorCode.E_TOOL_LOAD,
                ) from exc
        self._entries[entry.name] = entry

    def get(self, name: str) -> ToolEntry | None:
        return self._entries.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def __iter__(self) -> Iterator[ToolEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
