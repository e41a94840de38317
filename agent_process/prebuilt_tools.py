"""The registry entries of the built-in Tool resources, built once by the fork server.

A forked child loading bash and file-system itself touches hundreds of pages the fork server shares
with it (the resource, its exports and schemas, the handler module, path and name objects: each
reference count written copies a page; `bench_spawn_tools`); taking the entries built here touches a
few. An entry is only ever changed by `ToolRegistry.add`, which gave these their validator already.
Entries are held for the exact resource objects of the fork server's bundle, so a child that loaded
another bundle (or another version) builds its own.
"""

from __future__ import annotations

import os

from agent_process.registry import ToolEntry
from bundles.kinds import ToolSpec
from bundles.model import Resource

_held: dict[int, tuple[Resource[ToolSpec], str, tuple[ToolEntry, ...]]] = {}
"""id(resource) -> (the resource, its entry file, its entries); set in the fork server."""


def keep(resource: Resource[ToolSpec], entry_file: str, entries: list[ToolEntry]) -> None:
    _held[id(resource)] = (resource, entry_file, tuple(entries))


def clear() -> None:
    _held.clear()


def take(resource: Resource[ToolSpec]) -> list[ToolEntry] | None:
    """The entries built for this very resource, while its entry file still exists (else the
    child loads it and reports the missing file as before)."""
    held = _held.get(id(resource))
    if held is None or held[0] is not resource or not os.path.isfile(held[1]):
        return None
    return list(held[2])
