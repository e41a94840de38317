"""The per-step tool catalog: what the model sees in one step (ARCHITECTURE.md §6).

Rebuilt every step from the registry's visible entries (the agent's Tool resources in
`Agent.spec.tools` order, then extension tools); step middleware may then add, remove or edit
items in `ctx.tool_catalog`. A call to a name that is not in this step's catalog is refused with
`E_TOOL_NOT_IN_CATALOG`, whatever the registry holds: the catalog is the allow-list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from agent_process.registry import ToolEntry, ToolRegistry


class CatalogItem(msgspec.Struct, kw_only=True):
    """Mutable on purpose: step middleware may edit a description or a schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    source_kind: str = "config"
    """`config`, `extension` or `mcp` (ARCHITECTURE.md §6)."""
    source_name: str = ""


def item_of(entry: ToolEntry) -> CatalogItem:
    return CatalogItem(
        name=entry.name,
        description=entry.description,
        parameters=entry.parameters,
        source_kind=entry.origin.kind.value,
        source_name=entry.origin.name,
    )


class CatalogBuilder:
    """Precomputes the default items once; each step gets a fresh list of fresh items, so an
    edit by middleware in one step never leaks into the next."""

    __slots__ = ("_default", "_registry")

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._default = [item_of(e) for e in registry if e.visible]

    def build(self) -> list[CatalogItem]:
        return [msgspec.structs.replace(item) for item in self._default]

    def item(self, name: str) -> CatalogItem:
        entry = self._registry.get(name)
        if entry is None:
            raise KeyError(f"no tool named {name!r} in the registry")
        return item_of(entry)


def names_of(items: Iterable[CatalogItem]) -> frozenset[str]:
    return frozenset(item.name for item in items)
