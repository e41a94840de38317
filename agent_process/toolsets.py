"""Small composable toolsets (pydantic-ai style): each yields `ToolEntry`s, wrappers rename.

- `FunctionToolset`: entries added one by one (an extension's `api.tools.register`).
- `PrefixedToolset`: `<prefix>__<name>`, which is how a Tool resource or an extension owns its
  exports' names (ARCHITECTURE.md §6).
- `FilteredToolset`, `RenamedToolset`: keep some entries / give some a new export name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping

from agent_process.registry import SEPARATOR, ToolEntry, ToolRegistryError, check_name_part
from protocol.errors import ErrorCode


class FunctionToolset:
    """A mutable list of entries whose names are export names (no prefix yet)."""

    def __init__(self, entries: Iterable[ToolEntry] = ()) -> None:
        self._entries: dict[str, ToolEntry] = {}
        for entry in entries:
            self.add(entry)

    def add(self, entry: ToolEntry) -> None:
        check_name_part(entry.name, "export name", entry.origin)
        if entry.name in self._entries:
            raise ToolRegistryError(
                f"{entry.origin.describe()} registers the tool {entry.name!r} twice; "
                "register each name once",
                ErrorCode.E_TOOL_NAME_CONFLICT,
            )
        self._entries[entry.name] = entry

    def __iter__(self) -> Iterator[ToolEntry]:
        return iter(list(self._entries.values()))


class PrefixedToolset:
    def __init__(self, inner: Iterable[ToolEntry], prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    def __iter__(self) -> Iterator[ToolEntry]:
        for entry in self._inner:
            check_name_part(self._prefix, "resource name", entry.origin)
            yield dataclasses.replace(entry, name=f"{self._prefix}{SEPARATOR}{entry.name}")


class FilteredToolset:
    def __init__(self, inner: Iterable[ToolEntry], keep: Callable[[ToolEntry], bool]) -> None:
        self._inner = inner
        self._keep = keep

    def __iter__(self) -> Iterator[ToolEntry]:
        return (entry for entry in self._inner if self._keep(entry))


class RenamedToolset:
    def __init__(self, inner: Iterable[ToolEntry], names: Mapping[str, str]) -> None:
        self._inner = inner
        self._names = names

    def __iter__(self) -> Iterator[ToolEntry]:
        for entry in self._inner:
            new = self._names.get(entry.name)
            yield entry if new is None else dataclasses.replace(entry, name=new)
