"""What tool, extension and connector authors write against: Protocols and typed exceptions.

Handler files (bundles/base, bundles/examples, users' bundles) import only this module and
`protocol`, never `agent_process`: the agent process implements these Protocols.

Handlers raise; the executor turns exceptions into `{status: error, error: {...}}` data for the
model. Raise `ToolFailed` for an expected failure with a code and a suggestion, `CallDeferred`
to hand the call to the client (seed 001); any other exception is reported as `E_TOOL`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

JsonValue = Any
JsonObject = dict[str, Any]


class Logger(Protocol):
    """The structlog bound logger handed to tools and extensions (key/value events)."""

    def debug(self, event: str, **kw: Any) -> Any: ...
    def info(self, event: str, **kw: Any) -> Any: ...
    def warning(self, event: str, **kw: Any) -> Any: ...
    def error(self, event: str, **kw: Any) -> Any: ...


class AgentsRuntime(Protocol):
    """The `agents` bridge: every call travels agent -> orchestrator -> agent.

    Failures come back as `ToolFailed` with an `E_AGENT_*` code.
    """

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str = "agent.request",
        timeout_ms: int = 60_000,
        async_: bool = False,
        metadata: JsonObject | None = None,
    ) -> JsonObject: ...

    async def send(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str = "agent.send",
        metadata: JsonObject | None = None,
    ) -> JsonObject: ...

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> JsonObject: ...

    async def list(self, *, include_all: bool = False) -> JsonObject: ...

    async def catalog(self) -> JsonObject: ...


@runtime_checkable
class ToolContext(Protocol):
    """The minimal context of seed 002 (plus the Tool's own `config`)."""

    @property
    def workdir(self) -> Path: ...
    @property
    def logger(self) -> Logger: ...
    @property
    def runtime(self) -> AgentsRuntime: ...
    @property
    def message(self) -> Mapping[str, Any]:
        """The assistant message that holds this tool call."""
        ...

    @property
    def tool_call_id(self) -> str: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def instance_key(self) -> str: ...
    @property
    def config(self) -> Mapping[str, Any]:
        """`Tool.spec.config`: the tool's settings (roots, caps, allow-lists)."""
        ...

    @property
    def secret_values(self) -> frozenset[str]:
        """Every value resolved from a ValueSource: never hand these to child processes."""
        ...


ToolHandler = Callable[[ToolContext, JsonObject], Awaitable[JsonValue] | JsonValue]


class ToolFailed(Exception):
    """An expected tool failure: reported to the model with this code and suggestion."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "E_TOOL",
        suggestion: str | None = None,
        help_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.suggestion = suggestion
        self.help_url = help_url


class CallDeferred(Exception):
    """Hand this call to the client that started the turn as a JSON-RPC 2.0 request.

    The turn suspends until the client answers (or the TTL passes); `message` is shown to the
    user while they decide and is not part of `params`.
    """

    def __init__(
        self, method: str, params: JsonObject | None = None, message: str | None = None
    ) -> None:
        super().__init__(f"deferred to client: {method}")
        self.method = method
        self.params = params or {}
        self.message = message


class Pending:
    """Return this from a handler that submitted long-running work (seed 003, 6.3):
    the result is `{status: pending, handle, output}`."""

    __slots__ = ("handle", "output")

    def __init__(self, handle: str, output: JsonValue = None) -> None:
        self.handle = handle
        self.output = output
