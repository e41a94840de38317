"""A Tool resource -> its registry entries (`<resource>__<export>`), checked at load.

The entry module exports either `handlers: dict[str, fn]` (each export of `spec.exports` must have
one) or a `bundles.toolset.Toolset` (exports and schemas come from the decorated functions;
`spec.exports`, when given, selects exports and may set description and timeout). An export
with `deferred:` needs no handler: it always runs on the client (ARCHITECTURE.md §10).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from agent_process import prebuilt_tools
from agent_process.loading import EntryLoadError, load_entry
from agent_process.registry import (
    SourceKind,
    ToolEntry,
    ToolOrigin,
    ToolRegistryError,
    check_name_part,
)
from agent_process.toolsets import FunctionToolset, PrefixedToolset
from bundles.kinds import DeferredSpec, ToolExport, ToolSpec
from bundles.model import Resource
from bundles.sdk import CallDeferred, JsonObject, ToolContext
from bundles.toolset import Toolset
from protocol.errors import ErrorCode


def load_tool_resource(resource: Resource[ToolSpec]) -> Iterable[ToolEntry]:
    """Entries of one Tool resource, named `<resource>__<export>`; raises ToolRegistryError."""
    prebuilt = prebuilt_tools.take(resource)  # a built-in tool, built by the fork server
    if prebuilt is not None:
        return prebuilt
    spec = resource.spec
    origin = ToolOrigin(SourceKind.CONFIG, resource.name, str(resource.location))
    if spec.mcp is not None and spec.entry is None:
        return []  # MCP-bridged tools arrive with the MCP bridge (a later issue)
    module = _load_module(resource, origin) if spec.entry else None
    toolset = _find_toolset(module) if module is not None else None
    if toolset is not None:
        entries = _from_toolset(toolset, spec, origin)
    else:
        entries = _from_handlers(module, spec, origin)
    return list(PrefixedToolset(FunctionToolset(entries), resource.name))


def _load_module(resource: Resource[ToolSpec], origin: ToolOrigin) -> ModuleType:
    assert resource.spec.entry is not None
    try:
        return load_entry(resource.spec.entry, resource.root)
    except EntryLoadError as exc:
        raise ToolRegistryError(f"{origin.describe()}: {exc}", ErrorCode.E_TOOL_LOAD) from exc


def _find_toolset(module: ModuleType) -> Toolset | None:
    if hasattr(module, "handlers"):
        return None
    found = [v for v in vars(module).values() if isinstance(v, Toolset)]
    return found[0] if len(found) == 1 else None


def _from_handlers(
    module: ModuleType | None, spec: ToolSpec, origin: ToolOrigin
) -> list[ToolEntry]:
    handlers: Any = getattr(module, "handlers", None) if module is not None else {}
    if not isinstance(handlers, dict):
        raise ToolRegistryError(
            f"{origin.describe()}: entry {spec.entry!r} must export `handlers: dict[str, fn]` "
            "or one bundles.toolset.Toolset",
            ErrorCode.E_TOOL_LOAD,
        )
    if not spec.exports:
        raise ToolRegistryError(
            f"{origin.describe()}: spec.exports is empty; declare at least one export",
            ErrorCode.E_TOOL_LOAD,
        )
    entries = []
    for export in spec.exports:
        check_name_part(export.name, "export name", origin)
        handler = handlers.get(export.name)
        client_only = export.deferred is not None and handler is None
        if export.deferred is not None and handler is None:
            handler = _deferred_handler(export.deferred)
        if not callable(handler):
            raise ToolRegistryError(
                f"{origin.describe()}: export {export.name!r} has no handler; add "
                f"handlers[{export.name!r}] = fn(ctx, input) to {spec.entry!r} "
                "or remove the export",
                ErrorCode.E_TOOL_LOAD,
            )
        # A client-only export does nothing here: cut before its pending call was saved, the
        # client never saw it, so a resumed turn may simply ask again (saved, the call resumes).
        idempotent = export.idempotent or client_only
        entries.append(_entry(export, handler, _is_async(handler), spec, origin, idempotent))
    return entries


def _from_toolset(toolset: Toolset, spec: ToolSpec, origin: ToolOrigin) -> list[ToolEntry]:
    selected = {e.name: e for e in spec.exports}
    for name in selected:
        if name not in toolset.tools:
            raise ToolRegistryError(
                f"{origin.describe()}: export {name!r} is not a tool of toolset "
                f"{toolset.name!r} (it has: {', '.join(toolset.tools) or 'none'})",
                ErrorCode.E_TOOL_LOAD,
            )
    entries = []
    for name, tool in toolset.tools.items():
        if selected and name not in selected:
            continue
        export = selected.get(name)
        entry = ToolEntry(
            name=name,
            handler=tool.handler,
            is_async=tool.is_async,
            origin=origin,
            description=(export.description if export and export.description else None)
            or tool.description,
            parameters=tool.parameters,
            timeout_ms=(export.timeout_ms if export else None) or tool.timeout_ms,
            error_message_limit=spec.error_message_limit,
            result_limit=spec.result_limit,
            config=spec.config,
            idempotent=export.idempotent if export else False,
        )
        entries.append(entry)
    return entries


def _entry(
    export: ToolExport,
    handler: Callable[..., Any],
    is_async: bool,
    spec: ToolSpec,
    origin: ToolOrigin,
    idempotent: bool,
) -> ToolEntry:
    return ToolEntry(
        name=export.name,
        handler=handler,
        is_async=is_async,
        origin=origin,
        description=export.description,
        parameters=export.parameters,
        timeout_ms=export.timeout_ms,
        error_message_limit=spec.error_message_limit,
        result_limit=spec.result_limit,
        config=spec.config,
        idempotent=idempotent,
    )


def _deferred_handler(deferred: DeferredSpec) -> Callable[[ToolContext, JsonObject], Any]:
    async def handler(ctx: ToolContext, input: JsonObject) -> Any:
        raise CallDeferred(deferred.method, dict(input), deferred.message)

    return handler


def _is_async(fn: Callable[..., Any]) -> bool:
    target = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)
