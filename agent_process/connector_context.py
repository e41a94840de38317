"""The connector SDK's implementation: load a Connection's connector and give it a context.

`load_connector` finds the Connection named by the process id, its Connector, resolves the
Connection's config and secrets (ValueSources) and imports the Connector's entry by path.
`HostContext.emit` turns a connector event into an `event` frame for the orchestrator, which
routes it through the Connection's ingress rules; the answer comes back by correlation id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from agent_process.loading import EntryLoadError, load_entry
from bundles.diagnostics import BundleError
from bundles.kinds import ConnectionSpec, ConnectorSpec, Kind, ValueSource
from bundles.model import Bundle, Resource
from bundles.refs import (
    connection_connector,
    connection_swarm,
    entry_agent,
    resolve_tools,
    swarm_agents,
)
from bundles.sdk import Logger
from bundles.values import ValueProblem, value_of
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event
from protocol.ids import ORCHESTRATOR, ProcessId, agent_address
from protocol.jsonrpc import ANSWER_EVENT, PENDING_CALL, RESUMED_CALL
from protocol.messages import Event, Message
from protocol.stream import StreamDelta

Send = Callable[[Message], Awaitable[None]]
RunFn = Callable[[Any], Coroutine[Any, Any, None]]
CALL_TURNS_KEPT = 1024
"""Pending calls whose turn a streaming answer can still hear (the newest)."""


class ConnectorStartFailed(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


def _fail(message: str, suggestion: str) -> ConnectorStartFailed:
    return ConnectorStartFailed(
        ErrorInfo(code=ErrorCode.E_CONNECTOR_START_FAILED, message=message, suggestion=suggestion)
    )


@dataclass(frozen=True, slots=True)
class Reply:
    """`bundles.sdk.ConnectorReply`."""

    event_id: str
    text: str = ""
    accepted: bool = False
    error_code: str | None = None
    error_message: str | None = None
    deferred: dict[str, Any] | None = None
    """The JSON-RPC 2.0 request of a deferred tool call that suspended the turn (ARCHITECTURE.md
    §10): the client answers it (webhook: `POST /rpc`) and the turn resumes."""
    usage: Mapping[str, int] = field(default_factory=dict)
    """The turn's token counts, when the agent reported them."""
    resumed_call: str | None = None
    """The call whose answer (given elsewhere) resumed the turn (`HostContext.on_resumed`)."""

    @classmethod
    def of(cls, event_id: str, response: AgentEvent) -> Reply:
        """`event_id` is the emitted event's; the daemon names another (`metadata.eventId`)
        when the emit repeated an idempotency key: the first event's, the one it took."""
        error = response.error
        deferred = response.metadata.get("deferred")
        first = response.metadata.get("eventId")
        usage = response.metadata.get("usage")
        resumed = response.metadata.get(RESUMED_CALL)
        return cls(
            resumed_call=resumed if isinstance(resumed, str) else None,
            deferred=deferred if isinstance(deferred, dict) else None,
            usage={k: v for k, v in usage.items() if isinstance(v, int)}
            if isinstance(usage, dict)
            else {},
            event_id=first if isinstance(first, str) and first else event_id,
            text=response.input,
            accepted=bool(response.metadata.get("accepted")),
            error_code=str(error.code) if error is not None else None,
            error_message=error.message if error is not None else None,
        )


OnResumed = Callable[[Reply], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """`bundles.sdk.ToolSummary`."""

    name: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """`bundles.sdk.AgentSummary`."""

    name: str
    description: str = ""
    tools: tuple[ToolInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class SwarmInfo:
    """`bundles.sdk.SwarmSummary`."""

    name: str
    entry_agent: str
    instance_key: str
    agents: tuple[AgentInfo, ...] = ()

    @classmethod
    def of(cls, bundle: Bundle, connection: Resource[ConnectionSpec]) -> SwarmInfo:
        swarm = connection_swarm(bundle, connection)
        agents = tuple(
            AgentInfo(
                name=agent.name,
                description=agent.spec.description or "",
                tools=tuple(
                    ToolInfo(f"{tool.name}__{export.name}", export.description)
                    for tool in resolve_tools(bundle, agent)
                    for export in tool.spec.exports
                ),
            )
            for agent in swarm_agents(bundle, swarm)
        )
        return cls(
            name=swarm.name,
            entry_agent=entry_agent(bundle, swarm).name,
            instance_key=swarm.spec.instance_key or swarm.name,
            agents=agents,
        )


@dataclass(frozen=True, slots=True)
class LoadedConnector:
    connection: Resource[ConnectionSpec]
    connector: Resource[ConnectorSpec]
    module: ModuleType
    run: RunFn
    start: RunFn | None
    config: dict[str, Any]
    secrets: dict[str, str]
    swarm: SwarmInfo


def _resolve_all(
    bundle: Bundle,
    raw: str | bool | float | ValueSource | list[str | ValueSource],
    state_root: Path,
    where: str,
) -> str | bool | float | list[str]:
    if isinstance(raw, list):
        return [_resolve(bundle, item, state_root, f"{where}[{i}]") for i, item in enumerate(raw)]
    if isinstance(raw, bool | int | float):  # a plain YAML number or boolean, as it is
        return raw
    return _resolve(bundle, raw, state_root, where)


def _resolve(bundle: Bundle, raw: str | ValueSource, state_root: Path, where: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return value_of(bundle, raw, state_root=state_root)
    except ValueProblem as problem:
        raise _fail(f"{where}: {problem.message}", problem.suggestion) from None


def _connection(bundle: Bundle, name: str) -> Resource[ConnectionSpec]:
    for res in bundle.of_kind(Kind.CONNECTION):
        if res.name == name:
            found: Resource[ConnectionSpec] = res
            return found
    raise _fail(f"no Connection named {name!r} in the bundle", "goondan restart after editing")


def load_connector(bundle: Bundle, connection_name: str, state_root: Path) -> LoadedConnector:
    """Everything the host needs; raises ConnectorStartFailed with a coded reason."""
    connection = _connection(bundle, connection_name)
    try:
        connector = connection_connector(bundle, connection)
    except BundleError as exc:
        raise _fail(str(exc), "fix spec.connectorRef of the Connection") from None
    where = f"Connection/{connection.name}"
    config = dict(connector.spec.config)
    for key, raw in connection.spec.config.items():
        config[key] = _resolve_all(bundle, raw, state_root, f"{where} spec.config.{key}")
    secrets = {
        key: _resolve(bundle, raw, state_root, f"{where} spec.secrets.{key}")
        for key, raw in connection.spec.secrets.items()
    }
    try:
        module = load_entry(connector.spec.entry, connector.root)
    except EntryLoadError as exc:
        raise _fail(f"Connector/{connector.name}: {exc}", "fix spec.entry") from None
    run = getattr(module, "run", None)
    start = getattr(module, "start", None)
    if not callable(run):
        raise _fail(
            f"Connector/{connector.name}: {connector.spec.entry} exports no `run(ctx)`",
            "define `async def run(ctx)` in the connector's entry file",
        )
    try:
        swarm = SwarmInfo.of(bundle, connection)
    except BundleError as exc:
        raise _fail(str(exc), "fix the Connection's swarm (goondan validate)") from None
    return LoadedConnector(connection, connector, module, run,
                           start if callable(start) else None, config, secrets, swarm)  # fmt: skip


@dataclass(slots=True)
class HostContext:
    """`bundles.sdk.ConnectorContext` for one connector process."""

    process_id: ProcessId
    send: Send
    config: Mapping[str, Any]
    secrets: Mapping[str, str]
    connector: str
    swarm: SwarmInfo = field(default_factory=lambda: SwarmInfo("", "", ""))
    logger: Logger = field(default_factory=lambda: structlog.get_logger("goondan.connector"))
    state: dict[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    orchestrator_pid: int | None = None
    state_dir: Path | None = None
    """`<state root>/connectors/<swarm>/<Connection>`: survives restarts (e.g. an offset)."""
    answered: int = 0
    """Emits answered without an error (the host reports them as completed turns)."""
    closed: bool = False
    _pending: dict[str, asyncio.Future[AgentEvent]] = field(default_factory=dict)
    _deltas: dict[str, Callable[[StreamDelta], None]] = field(default_factory=dict)
    """The `on_delta` of each waiting emit that asked for a stream, by correlation id."""
    _call_turns: dict[str, str] = field(default_factory=dict)
    """A pending call's id -> the correlation id of the turn it suspended (the emit that
    started it): an answer that streams hears that turn's deltas when it resumes."""
    _on_resumed: OnResumed | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def connection(self) -> str:
        return self.process_id.name

    def _source(self) -> Source:
        return Source(
            kind=SourceKind.CONNECTOR,
            name=self.process_id.name,
            instance_key=self.process_id.instance_key,
        )

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
    ) -> Reply | None:
        props = dict(properties or {})
        if self.closed:
            return self._closed_reply()
        to = ORCHESTRATOR  # the Connection's ingress rules decide, or the addressed agent:
        if agent is not None:
            to = str(agent_address(agent, instance_key or self.swarm.instance_key))
        correlation_id = uuid.uuid4().hex
        reply_to = ReplyTo(target=str(self.process_id.address), correlation_id=correlation_id,
                           stream=on_delta is not None)  # fmt: skip
        frame = new_event(
            type=event,
            input=text,
            # the orchestrator replaces it with the routed instance key
            instance_key=self.process_id.instance_key,
            source=self._source(),
            reply_to=reply_to if reply else None,
            metadata=props,
            idempotency_key=idempotency_key,
        )
        if not reply:
            await self.send(Event(from_=str(self.process_id), to=to, payload=frame))
            return None
        fut: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = fut
        turn = self._answered_turn(event, props)
        if on_delta is not None:
            self._deltas[correlation_id] = on_delta
            if turn is not None:  # the resumed turn streams under its first emit's id
                self._deltas[turn] = on_delta
        try:
            await self.send(Event(from_=str(self.process_id), to=to, payload=frame))
            response = await fut
            self._remember_call(response, turn or correlation_id)
            answer = Reply.of(frame.id, response)
            if answer.error_code is None:
                self.answered += 1
            return answer
        finally:  # also when the caller's own timeout cancels the wait
            self._pending.pop(correlation_id, None)
            self._deltas.pop(correlation_id, None)
            if turn is not None and on_delta is not None and self._deltas.get(turn) is on_delta:
                del self._deltas[turn]

    def _answered_turn(self, event: str, props: Mapping[str, Any]) -> str | None:
        """For an answer to a pending call: the correlation id of the turn it resumes."""
        rpc = props.get("rpc")
        if event != ANSWER_EVENT or not isinstance(rpc, Mapping):
            return None
        return self._call_turns.get(str(rpc.get("id")))

    def _remember_call(self, response: AgentEvent, turn: str) -> None:
        call = response.metadata.get(PENDING_CALL)
        if not isinstance(call, str):
            return
        self._call_turns[call] = turn
        while len(self._call_turns) > CALL_TURNS_KEPT:  # the oldest calls go first
            del self._call_turns[next(iter(self._call_turns))]

    def deliver_delta(self, delta: StreamDelta) -> bool:
        """A delta of a waiting emit's turn, to its `on_delta`; False when none waits for it.
        A failing callback is logged, never the host's problem."""
        on_delta = self._deltas.get(delta.correlation_id)
        if on_delta is None:
            return False
        try:
            on_delta(delta)
        except Exception as exc:
            self.logger.error("connector_delta_failed", error=f"{type(exc).__name__}: {exc}",
                              exc_info=exc)  # fmt: skip
        return True

    def on_resumed(self, handler: OnResumed) -> None:
        self._on_resumed = handler

    def deliver(self, response: AgentEvent) -> bool:
        fut = self._pending.pop(response.in_reply_to or "", None)
        if fut is None or fut.done():
            return self._resumed(response)
        fut.set_result(response)
        return True

    def _resumed(self, response: AgentEvent) -> bool:
        """A turn's reply after its emit was answered: the connector's `on_resumed`."""
        call = response.metadata.get(RESUMED_CALL)
        if self._on_resumed is None or not isinstance(call, str) or self.closed:
            return False
        task = asyncio.ensure_future(self._hand_on(self._on_resumed, Reply.of("", response)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _hand_on(self, handler: OnResumed, reply: Reply) -> None:
        try:
            await handler(reply)
        except Exception:  # the connector's bug must not end its process's receive loop
            self.logger.error("resumed_reply_failed", call_id=reply.resumed_call, exc_info=True)

    def _closed_reply(self) -> Reply:
        return Reply(
            event_id="",
            error_code=ErrorCode.E_CONNECTOR_CLOSED,
            error_message=f"connector {self.process_id} is shutting down",
        )

    def close(self) -> None:
        """No more emits; every waiting emit gets E_CONNECTOR_CLOSED."""
        self.closed = True
        for correlation_id, fut in list(self._pending.items()):
            if not fut.done():
                error = ErrorInfo(code=ErrorCode.E_CONNECTOR_CLOSED, message="shutting down")
                fut.set_result(_error_event(correlation_id, error, self._source()))
        self._pending.clear()


def _error_event(correlation_id: str, error: ErrorInfo, source: Source) -> AgentEvent:
    event = new_event(type="agent.response", input="", instance_key="-", source=source,
                      metadata={"inReplyTo": correlation_id})  # fmt: skip
    return AgentEvent(
        id=event.id, type=event.type, instance_key=event.instance_key, source=source,
        metadata=event.metadata, trace=event.trace, error=error, created_at=event.created_at,
    )  # fmt: skip
