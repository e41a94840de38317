"""Extensions: modules exporting `register(api, config)`, loaded in `Agent.spec.extensions` order.

`api` (bundles.sdk.ExtensionApi) offers `pipeline.register`, `tools.register`, `state.get/set`,
`events.on/emit` and `logger`. A module that cannot be imported (or has no `register`) fails the
process start with `E_EXT_LOAD`; a `register` that raises fails it with `E_EXT_INIT`.
State is saved to `extensions/<name>.json` (atomically) at turn end and on close, when it changed.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agent_process.loading import EntryLoadError, load_entry
from agent_process.pipeline import Pipelines
from agent_process.registry import SourceKind, ToolEntry, ToolOrigin
from agent_process.telemetry import EventBus, Subscriber
from agent_process.toolsets import FunctionToolset, PrefixedToolset
from bundles.kinds import ExtensionSpec
from bundles.model import Resource
from bundles.sdk import ExtensionApi, JsonObject, Logger, ToolHandler
from protocol.durable import write_atomic
from protocol.errors import ErrorCode

_log = structlog.get_logger("goondan.extensions")


class ExtensionFailure(Exception):
    def __init__(self, code: ErrorCode, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.suggestion = suggestion


class _PipelineApi:
    def __init__(self, pipelines: Pipelines, owner: str) -> None:
        self._pipelines = pipelines
        self._owner = owner

    def register(self, kind: str, fn: Callable[[Any], Awaitable[Any]]) -> None:
        self._pipelines.register(kind, fn, owner=self._owner)


class _ToolsApi:
    def __init__(self, owner: str, origin: ToolOrigin) -> None:
        self._owner = owner
        self._origin = origin
        self.toolset = FunctionToolset()
        self.sealed = False
        """Set once the registry is built: tools can only be added during register()."""

    def register(
        self,
        name: str,
        handler: ToolHandler,
        *,
        description: str = "",
        parameters: JsonObject | None = None,
        timeout_ms: int | None = None,
        visible: bool = True,
        error_message_limit: int = 1000,
    ) -> str:
        if self.sealed:
            raise RuntimeError(
                f"extension {self._owner!r}: tools.register({name!r}) after start-up; "
                "register tools inside register(api, config)"
            )
        if not callable(handler):
            raise TypeError(f"tools.register({name!r}, ...) needs a handler fn(ctx, input)")
        target = getattr(handler, "__call__", None)  # noqa: B004 - async callables count too
        self.toolset.add(
            ToolEntry(
                name=name,
                handler=handler,
                is_async=inspect.iscoroutinefunction(handler)
                or inspect.iscoroutinefunction(target),
                origin=self._origin,
                description=description,
                parameters=parameters or {"type": "object", "properties": {}},
                timeout_ms=timeout_ms,
                error_message_limit=error_message_limit,
                visible=visible,
            )
        )
        return f"{self._owner}__{name}"


class _StateApi:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._value: JsonObject = {}
        self._saved = b"{}"
        if path.exists():
            try:
                loaded = msgspec.json.decode(path.read_bytes())
                self._value = loaded if isinstance(loaded, dict) else {}
                self._saved = msgspec.json.encode(self._value)
            except msgspec.DecodeError as exc:
                _log.error("extension_state_unreadable", path=str(path), error=str(exc))

    def get(self) -> JsonObject:
        return self._value

    def set(self, value: JsonObject) -> None:
        if not isinstance(value, dict):
            raise TypeError("state.set() takes a JSON object (dict)")
        self._value = value

    def save(self) -> None:
        """Write when the state differs from what is on disk (in-place edits count too)."""
        data = msgspec.json.encode(self._value)
        if data != self._saved:
            write_atomic(self._path, data)
            self._saved = data


class _EventsApi:
    def __init__(self, bus: EventBus, owner: str) -> None:
        self._bus = bus
        self._owner = owner

    def on(self, event_type: str, fn: Subscriber) -> None:
        self._bus.on(event_type, fn, owner=self._owner)

    def emit(self, event_type: str, data: JsonObject | None = None) -> None:
        self._bus.emit_custom(event_type, data, owner=self._owner)


class ExtensionHandle:
    """One loaded extension: implements bundles.sdk.ExtensionApi for its `register`."""

    def __init__(
        self,
        resource: Resource[ExtensionSpec],
        *,
        pipelines: Pipelines,
        bus: EventBus,
        state_path: Path,
        logger: Any,
    ) -> None:
        self.name = resource.name
        self.config = resource.spec.config
        origin = ToolOrigin(SourceKind.EXTENSION, resource.name, str(resource.location))
        self.pipeline = _PipelineApi(pipelines, resource.name)
        self.tools = _ToolsApi(resource.name, origin)
        self.state = _StateApi(state_path)
        self.events = _EventsApi(bus, resource.name)
        self.logger: Logger = logger.bind(extension=resource.name)

    def tool_entries(self) -> list[ToolEntry]:
        """The tools this extension registered, named `<extension>__<name>`; seals the API."""
        self.tools.sealed = True
        return list(PrefixedToolset(self.tools.toolset, self.name))


async def load_extension(
    resource: Resource[ExtensionSpec],
    *,
    pipelines: Pipelines,
    bus: EventBus,
    state_path: Path,
    logger: Any,
) -> ExtensionHandle:
    """Import the entry and run `register(api, config)`; raises ExtensionFailure."""
    where = f"Extension {resource.name!r} ({resource.location})"
    handle = ExtensionHandle(
        resource, pipelines=pipelines, bus=bus, state_path=state_path, logger=logger
    )
    if resource.spec.entry is None:
        if resource.spec.mcp is not None:
            return handle  # MCP-bridged tools arrive with the MCP bridge (a later issue)
        raise ExtensionFailure(
            ErrorCode.E_EXT_LOAD, f"{where} has no spec.entry", "set spec.entry to a .py file"
        )
    try:
        module = load_entry(resource.spec.entry, resource.root)
    except EntryLoadError as exc:
        raise ExtensionFailure(ErrorCode.E_EXT_LOAD, f"{where}: {exc}") from exc
    register = getattr(module, "register", None)
    if not callable(register):
        raise ExtensionFailure(
            ErrorCode.E_EXT_LOAD,
            f"{where}: entry {resource.spec.entry!r} does not define register(api, config)",
            "add `def register(api, config): ...` (or async def) to the module",
        )
    api: ExtensionApi = handle  # checked statically against the SDK's Protocol
    try:
        result = register(api, resource.spec.config)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        raise ExtensionFailure(
            ErrorCode.E_EXT_INIT,
            f"{where}: register() raised {type(exc).__name__}: {exc}",
            "fix the extension's register(api, config) or its config",
        ) from exc
    return handle
