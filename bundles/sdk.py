"""What tool, extension and connector authors write against: Protocols and typed exceptions.

Handler files (bundles/base, bundles/examples, users' bundles) import only this module and
`protocol`, never `agent_process`: the agent process implements these Protocols.

Handlers raise; the executor turns exceptions into `{status: error, error: {...}}` data for the
model. Raise `ToolFailed` for an expected failure with a code and a suggestion, `CallDeferred`
to hand the call to the client (ARCHITECTURE.md §10); any other exception is reported as `E_TOOL`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from bundles import codecache
from protocol.jsontypes import JsonObject as JsonObject
from protocol.jsontypes import JsonValue as JsonValue
from protocol.stream import DeltaKind as DeltaKind
from protocol.stream import GapWatch as GapWatch
from protocol.stream import StreamDelta as StreamDelta


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

    async def restart(self, reason: str) -> JsonObject:
        """Re-read the bundle and gracefully restart the swarm's agents after current turns."""
        ...


@runtime_checkable
class ToolContext(Protocol):
    """The minimal tool context of ARCHITECTURE.md §6 (plus the Tool's own `config`)."""

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
        """The bundle's secrets (API keys, tokens, secretRef values): never hand them to child
        processes."""
        ...


ToolHandler = Callable[[ToolContext, JsonObject], Awaitable[JsonValue] | JsonValue]


class CodedError(Exception):
    """An error that reaches a model or a user as data: a code, a message, what to change."""

    default_code = "E_TOOL"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        suggestion: str | None = None,
        help_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code or self.default_code
        self.suggestion = suggestion
        self.help_url = help_url


class ToolFailed(CodedError):
    """An expected tool failure: reported to the model with this code and suggestion."""


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
    """Return this from a handler that submitted long-running work (ARCHITECTURE.md §6):
    the result is `{status: pending, handle, output}`."""

    __slots__ = ("handle", "output")

    def __init__(self, handle: str, output: JsonValue = None) -> None:
        self.handle = handle
        self.output = output


# -- extensions and middleware ------------------------------------------------------------


class MiddlewareError(CodedError):
    """Raise from middleware to short-circuit on purpose (deny a call, stop a turn).

    In `toolCall` middleware it becomes the call's error result (fed back to the model); in
    `step` or `turn` middleware it fails the turn with this code. Any other exception raised by
    middleware is a bug in the extension: it is logged with the extension's name and reported
    as `E_TOOL_MIDDLEWARE` (tool calls) or `E_AGENT_TURN_FAILED` (steps and turns).
    """

    default_code = "E_TOOL_MIDDLEWARE"


class CatalogItem(Protocol):
    """One tool as the model sees it in one step; `source` is `config`, `extension` or `mcp`."""

    name: str
    description: str
    parameters: JsonObject

    @property
    def source_kind(self) -> str: ...
    @property
    def source_name(self) -> str: ...


class Conversation(Protocol):
    """The event-sourced message list; every edit is a MessageEvent written as it happens."""

    @property
    def messages(self) -> list[Any]: ...
    def append(self, role: str, content: str, **fields: Any) -> Any: ...
    def replace(self, message_id: str, content: str) -> Any: ...
    def remove(self, message_id: str) -> None: ...
    def truncate(self) -> None: ...


class TurnMiddlewareContext(Protocol):
    """`turn` middleware: one AgentEvent in, one TurnResult out of `await ctx.next()`."""

    @property
    def event(self) -> Any: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def instance_key(self) -> str: ...
    @property
    def conversation(self) -> Conversation: ...
    @property
    def agents(self) -> AgentsRuntime | None:
        """`request`/`send` to other agents through the orchestrator (None: not connected)."""
        ...

    async def next(self) -> Any: ...


class StepMiddlewareContext(Protocol):
    """`step` middleware: edit `tool_catalog` before `await ctx.next()`; the model sees that."""

    tool_catalog: list[Any]

    @property
    def turn(self) -> TurnMiddlewareContext: ...
    @property
    def index(self) -> int: ...
    def catalog_item(self, name: str) -> Any:
        """The registry's catalog item for `name` (to add a hidden tool back); KeyError if none."""
        ...

    @property
    def agents(self) -> AgentsRuntime | None:
        """The turn's `agents` bridge."""
        ...

    async def next(self) -> Any: ...


class ToolCallMiddlewareContext(Protocol):
    """`toolCall` middleware: edit `args` before `await ctx.next()`; transform the result after."""

    args: JsonObject

    @property
    def tool_name(self) -> str: ...
    @property
    def tool_call_id(self) -> str: ...
    @property
    def step(self) -> StepMiddlewareContext: ...
    async def next(self) -> Any: ...


TurnMiddleware = Callable[[TurnMiddlewareContext], Awaitable[Any]]
StepMiddleware = Callable[[StepMiddlewareContext], Awaitable[Any]]
ToolCallMiddleware = Callable[[ToolCallMiddlewareContext], Awaitable[Any]]


class PipelineApi(Protocol):
    def register(self, kind: str, fn: Callable[[Any], Awaitable[Any]]) -> None:
        """`kind` is `turn`, `step` or `toolCall`; the first registered runs outermost."""
        ...


class ToolsApi(Protocol):
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
        """Add a tool named `<extension>__<name>` to the registry and return that name.
        `visible=False` keeps it out of the default catalog (step middleware may add it)."""
        ...


class StateApi(Protocol):
    """Extension state, persisted to `extensions/<name>.json` at turn end and on shutdown."""

    def get(self) -> JsonObject: ...
    def set(self, value: JsonObject) -> None: ...


class EventsApi(Protocol):
    """Runtime events (`turn.*`, `step.*`, `tool.*`) and events emitted by extensions."""

    def on(self, event_type: str, fn: Callable[[JsonObject], Any]) -> None:
        """`event_type` is exact (`tool.completed`), a prefix (`tool.*`) or `*`."""
        ...

    def emit(self, event_type: str, data: JsonObject | None = None) -> None: ...


class ExtensionApi(Protocol):
    """What `register(api, config)` of an extension module receives."""

    @property
    def name(self) -> str: ...
    @property
    def pipeline(self) -> PipelineApi: ...
    @property
    def tools(self) -> ToolsApi: ...
    @property
    def state(self) -> StateApi: ...
    @property
    def events(self) -> EventsApi: ...
    @property
    def logger(self) -> Logger: ...


class ConnectorReply(Protocol):
    """What `ConnectorContext.emit` resolves to: the agent's answer, an acceptance, or a
    coded error (`E_CONNECTOR_NO_ROUTE` when no ingress rule fits, `E_AGENT_*` ...)."""

    @property
    def event_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def accepted(self) -> bool:
        """True when the rule routes without a reply: the event was queued for the agent."""
        ...

    @property
    def error_code(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def deferred(self) -> Mapping[str, Any] | None:
        """The JSON-RPC 2.0 request of a client-side tool call (or an approval,
        `goondan.approve`) the turn waits for (ARCHITECTURE.md §10); answer it with the event
        `deferred.answer`. Its final reply comes to whoever answers it, and, when someone
        else answers it (`goondan calls`, Studio, a webhook's `/rpc`), also to this connector
        through `ConnectorContext.on_resumed`."""
        ...

    @property
    def usage(self) -> Mapping[str, int]:
        """The turn's token counts (`input_tokens`, `output_tokens`, ...), empty if unknown."""
        ...

    @property
    def resumed_call(self) -> str | None:
        """On a reply handed to `on_resumed`: the id of the client-side call (the `id` of
        `deferred`) whose answer resumed the turn; None on an emit's own answer."""
        ...


class ToolSummary(Protocol):
    @property
    def name(self) -> str:
        """The name the model sees (`<tool>__<export>`)."""
        ...

    @property
    def description(self) -> str: ...


class AgentSummary(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str:
        """`Agent.spec.description`, or "" when the bundle says nothing."""
        ...

    @property
    def tools(self) -> Sequence[ToolSummary]:
        """The tools its Agent resource declares (MCP-bridged tools are known only once the
        agent runs, and are not listed)."""
        ...


class SwarmSummary(Protocol):
    """The swarm a connector serves, as the bundle declares it."""

    @property
    def name(self) -> str: ...
    @property
    def entry_agent(self) -> str: ...
    @property
    def instance_key(self) -> str:
        """`Swarm.spec.instanceKey`, else the swarm's name."""
        ...

    @property
    def agents(self) -> Sequence[AgentSummary]: ...


class ConnectorContext(Protocol):
    """What a connector entry (`async def run(ctx)`, optional `async def start(ctx)`) gets.

    `start` (if exported) runs before the process reports ready: bind sockets there, so a
    port in use is a coded start error. `run` then serves until it is cancelled (shutdown).
    `config` is the Connector's `spec.config` overlaid with the Connection's resolved
    `spec.config`; `secrets` are the Connection's resolved `spec.secrets`.
    """

    @property
    def connection(self) -> str: ...
    @property
    def connector(self) -> str: ...
    @property
    def config(self) -> Mapping[str, Any]: ...
    @property
    def secrets(self) -> Mapping[str, str]: ...
    @property
    def state(self) -> dict[str, Any]:
        """Scratch space shared by `start` and `run` (e.g. the bound server)."""
        ...

    @property
    def run_id(self) -> str:
        """Unique per connector process: a conversation per run (`cli:<run_id>`)."""
        ...

    @property
    def orchestrator_pid(self) -> int | None:
        """The daemon's pid (the `cli` connector reads its stdin through /proc)."""
        ...

    @property
    def state_dir(self) -> Path | None:
        """A directory kept across restarts of this Connection's connector (created on first
        use by the connector): `<state root>/connectors/<swarm>/<Connection>`."""
        ...

    @property
    def logger(self) -> Logger: ...

    @property
    def swarm(self) -> SwarmSummary: ...

    async def emit(
        self,
        event: str,
        properties: Mapping[str, Any] | None = None,
        text: str = "",
        *,
        reply: bool = True,
        idempotency_key: str | None = None,
        on_delta: Callable[[StreamDelta], None] | None = None,
        agent: str | None = None,
        instance_key: str | None = None,
    ) -> ConnectorReply | None:
        """Send an event through the Connection's ingress rules. With `reply`, wait for the
        agent's answer (or the rule's acceptance, or a coded error); else return None at
        once. Bound the wait with `asyncio.timeout(...)` around the call. An
        `idempotency_key` (the sender's own id of this input: a delivery id, an update id)
        makes a repeat within 24 h the first event: same event id, same reply. With `agent`
        (and `instance_key`, default the swarm's), the event goes to that agent instance
        instead: allowed for any of the swarm's agents when the Connection has no rules,
        else only when a rule that fits routes to that agent.

        `on_delta` (with `reply`) asks for the turn as it happens: it is called in order with
        each `StreamDelta` (text as the model writes it, tool calls starting and ending) before
        the reply comes back. It must not block (hand the work to a task); deltas are
        best-effort, the reply is the whole answer."""
        ...

    def on_resumed(self, handler: Callable[[ConnectorReply], Awaitable[None]]) -> None:
        """Where the final replies of this connector's turns go when their emit was already
        answered with a client-side call (`deferred`) that someone else answered: the handler
        gets each reply, whose `resumed_call` names the call (e.g. to post it to the chat the
        turn came from). Without a handler such replies are logged and dropped."""
        ...


def load_sibling(anchor: str, name: str) -> ModuleType:
    """Load the helper module `<name>.py` that sits beside `anchor` (pass `__file__`).

    Tool and extension files are loaded by path, not as a package, so they cannot use relative
    imports; this loads a helper once per process under a name unique to its path.
    """
    path = Path(anchor).with_name(f"{name}.py")
    key = f"_goondan_sibling_{name}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    try:
        return codecache.exec_file(key, path)
    except codecache.NotLoadable:
        raise ImportError(f"cannot load helper module {path}") from None
