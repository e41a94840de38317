"""Build, in the fork server, the registry entries of the built-in Tool resources.

A forked child loading bash and file-system itself (`load_tool_resource`) would touch many
pages it shares with the fork server and run that code for the first time; instead it takes
the entries built here (`prebuilt_tools`), with their validators attached (schema memo). The
registry's `build` still runs in each child, so it is run here often enough for CPython 3.11
to quicken and specialize it before the fork (see `warm.py`).

Only Tool resources of the built-in package are loaded: `preload` has imported their modules
already (plain definitions, fork-safe), so loading them here imports nothing. A user's tool
module is never imported in the fork server: its import-time code must run in the agent's own
process. Nothing is written, no thread, socket or loop is made.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_process import prebuilt_tools
from agent_process.loading import is_path_entry, module_name
from agent_process.registry import ToolEntry, ToolRegistry, ToolRegistryError
from agent_process.tool_loader import load_tool_resource
from bundles.kinds import BASE_PACKAGE, Kind, ToolSpec
from bundles.model import Bundle, Resource

RUNS = 64
"""As `warm.RUNS`: enough for 3.11 to quicken and specialize."""


def tool_loading(bundle: Bundle) -> None:
    prebuilt_tools.clear()
    built: list[list[ToolEntry]] = []
    for res in bundle.of_kind(Kind.TOOL):
        path = _imported_entry(res)
        if path is None:
            continue
        try:
            entries = list(load_tool_resource(res))
            ToolRegistry.build([entries])  # attaches each entry's validator
        except ToolRegistryError:
            continue  # the child loads it and reports it
        prebuilt_tools.keep(res, path, entries)
        built.append(entries)
    try:
        for _ in range(RUNS if built else 0):
            ToolRegistry.build(built)
    except ToolRegistryError:  # a name clash between them: each child reports it
        prebuilt_tools.clear()


def _imported_entry(res: Resource[ToolSpec]) -> str | None:
    """The entry file of a built-in Tool whose module this process holds already."""
    entry = res.spec.entry if isinstance(res.spec, ToolSpec) else None
    if res.package != BASE_PACKAGE or not isinstance(entry, str) or not is_path_entry(entry):
        return None
    path = (Path(res.root) / entry).resolve()
    return str(path) if module_name(path) in sys.modules else None
