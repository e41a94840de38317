"""Build, in the fork server, what every child of the bundle would otherwise build for itself.

A forked child shares these objects copy-on-write instead of making its own:
- each export's JSON Schema, checked against the metaschema and compiled (`schema.warm`);
- the entry files of tools, extensions and connectors, compiled (`codecache`);
- the built-in package's tool modules, imported (ours: plain definitions, no thread or socket
  at import, so fork-safe), and the registry entries of its Tool resources with their
  validators (`prebuilt_tools`): a child loading bash and file-system itself would touch
  hundreds of shared pages. A user's tool module is only compiled here, never imported: its
  import-time code runs in the agent's own process;
- each model's client, built once and dropped: the TLS trust store, the SDKs' lazily imported
  transports and the scripted models' patterns stay (`models.warm`).
Nothing is written, no thread, socket or loop is made.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from agent_process import models, prebuilt_tools, schema
from agent_process.loading import EntryLoadError, is_path_entry, load_entry, module_name
from agent_process.registry import ToolRegistry, ToolRegistryError
from agent_process.tool_loader import load_tool_resource
from bundles import codecache
from bundles.kinds import BASE_PACKAGE, Kind, ToolSpec
from bundles.model import Bundle, Resource


def build(bundle: Bundle) -> None:
    schema.warm(
        export.parameters
        for res in bundle.of_kind(Kind.TOOL)
        if isinstance(res.spec, ToolSpec)
        for export in res.spec.exports
    )
    codecache.warm(_entry_files(bundle))
    _import_base_tools(bundle)
    _base_tool_entries(bundle)  # after the import: it loads only modules held already
    models.warm(bundle.of_kind(Kind.MODEL))


def _entry_files(bundle: Bundle) -> set[Path]:
    """Entry files of tools, extensions and connectors, with the helpers beside them."""
    out: set[Path] = set()
    for kind in (Kind.TOOL, Kind.EXTENSION, Kind.CONNECTOR):
        for res in bundle.of_kind(kind):
            entry = getattr(res.spec, "entry", None)
            if not isinstance(entry, str) or not is_path_entry(entry):
                continue
            path = (Path(res.root) / entry).resolve()
            if path.is_file():
                out.update(path.parent.glob("*.py"))
    return out


def _import_base_tools(bundle: Bundle) -> None:
    """Children find these in `sys.modules` (same name per file, see `load_entry`)."""
    for res in bundle.of_kind(Kind.TOOL):
        entry = getattr(res.spec, "entry", None)
        if res.package == BASE_PACKAGE and isinstance(entry, str) and is_path_entry(entry):
            with contextlib.suppress(EntryLoadError):  # the child reports it when it loads
                load_entry(entry, Path(res.root))


def _base_tool_entries(bundle: Bundle) -> None:
    prebuilt_tools.clear()
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


def _imported_entry(res: Resource[ToolSpec]) -> str | None:
    """The entry file of a built-in Tool whose module this process holds already."""
    entry = res.spec.entry if isinstance(res.spec, ToolSpec) else None
    if res.package != BASE_PACKAGE or not isinstance(entry, str) or not is_path_entry(entry):
        return None
    path = (Path(res.root) / entry).resolve()
    return str(path) if module_name(path) in sys.modules else None
