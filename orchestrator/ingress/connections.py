"""Connections: their connector processes (always up) and the routing of their events.

One connector process per Connection of the swarm, address
`connector:<Connection name>:<Connector name>`. A connector's `event` frame goes through the
Connection's ingress rules (orchestrator.swarm.rules) to an agent instance, spawned on demand:

- a rule with `reply` (the default): the event keeps the connector's `replyTo`; the agent's
  answer is routed back by correlation id and completes the connector's `emit()`;
- a rule without `reply`: the agent gets the event without `replyTo`, and the connector at
  once gets an acceptance (`metadata.accepted`, `metadata.eventId`);
- no rule fits, or the key it names cannot be an instance key: a coded error back to the
  connector (E_CONNECTOR_NO_ROUTE / E_AGENT_INVALID_INSTANCE_KEY), and a log line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec
import structlog

from orchestrator.ingress.journal import Appended, JournalError
from orchestrator.ingress.port import Ingress
from orchestrator.routing.broker import Broker
from orchestrator.supervision.table import ProcessEntry
from orchestrator.swarm import rules as ingress
from orchestrator.swarm.view import Connection, CurrentSwarm
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent, Source, SourceKind, response_to
from protocol.ids import (
    ORCHESTRATOR,
    Address,
    ProcessKind,
    agent_address,
    check_instance_key,
    parse_address,
)
from protocol.messages import Event

log = structlog.get_logger("goondan.connections")


class TokenBucket:
    """`rate` tokens a minute, at most `rate` saved up."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self._tokens = rate
        self._at = now

    def take(self, now: float) -> bool:
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate / 60)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


SOURCE = Source(kind=SourceKind.ORCHESTRATOR, name=ORCHESTRATOR)


def _unrouted(connection: Connection, event: AgentEvent) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.E_CONNECTOR_NO_ROUTE,
        message=f"no ingress rule of Connection {connection.name!r} matches event "
        f"{event.type!r}; " + ingress.why_unrouted(connection.ingress, event.type, event.metadata),
        suggestion="add a rule to spec.ingress.rules (or a rule without `match` as a catch-all)",
    )


def _addressed(
    connection: Connection, event: AgentEvent, to: str
) -> tuple[ingress.Route | None, ErrorInfo | None]:
    """The route of an event its connector addressed to an agent instance (`to`)."""
    try:
        target = parse_address(to)
    except ProtocolError as exc:
        return None, ErrorInfo(code=ErrorCode.E_AGENT_NOT_FOUND, message=exc.message)
    rules = connection.ingress
    found = None
    if target.kind is ProcessKind.AGENT:
        found = ingress.route_to(
            rules, event.type, event.metadata, target.name, target.instance_key
        )
    if found is not None:
        return found, None
    if target.kind is ProcessKind.AGENT and target.name not in rules.agents:
        return None, ErrorInfo(
            code=ErrorCode.E_AGENT_NOT_FOUND,
            message=f"no agent {target.name!r} in swarm {rules.swarm!r}",
            suggestion=f"address one of: {', '.join(sorted(rules.agents))}",
        )
    return None, ErrorInfo(
        code=ErrorCode.E_CONNECTOR_NO_ROUTE,
        message=f"Connection {connection.name!r} may not address {to}: no ingress rule for "
        f"that agent fits event {event.type!r}",
        suggestion="add a rule routing to that agent, or remove the Connection's rules",
    )


class Connections:
    def __init__(
        self,
        broker: Broker,
        swarm: CurrentSwarm,
        ensure: Callable[[Address], None],
        acceptor: Ingress,
        known: Callable[[Address], bool] = lambda _a: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.acceptor = acceptor
        self._tasks: set[asyncio.Task[None]] = set()
        self.swarm = swarm
        self.ensure = ensure
        self.known = known
        """Whether an instance exists already (a live process or state on disk)."""
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def start_all(self) -> None:
        """Connectors are always up: start every one (the reconciler keeps them up)."""
        for address in self.swarm.view.connections:
            self.ensure(address)

    def on_event(self, entry: ProcessEntry, event: AgentEvent, to: str = ORCHESTRATOR) -> None:
        """A connector's event: route it through its Connection's ingress rules (`to` is the
        orchestrator), or to the agent instance the connector addressed (`to`)."""
        connection = self.swarm.view.connections.get(entry.address)
        if connection is None:
            self._reject(
                entry,
                event,
                ErrorCode.E_CONNECTOR_NO_ROUTE,
                f"{entry.address} is not a Connection of this swarm",
            )
            return
        if to == ORCHESTRATOR:
            found = ingress.route(connection.ingress, event.type, event.metadata)
            problem = None if found is not None else _unrouted(connection, event)
        else:
            found, problem = _addressed(connection, event, to)
        if found is None:
            assert problem is not None
            self._reject(entry, event, problem.code, problem.message, problem.suggestion)
            return
        try:
            key = check_instance_key(found.instance_key)
        except ProtocolError as exc:
            self._reject(entry, event, ErrorCode.E_AGENT_INVALID_INSTANCE_KEY, exc.message)
            return
        target = agent_address(found.agent, key)
        if not self._may_create(connection.name, connection.ingress, target):
            self._reject(
                entry, event, ErrorCode.E_AGENT_CAPACITY,
                f"Connection {connection.name!r} started its limit of new instances this minute "
                f"(spec.ingress.newInstancesPerMinute: {connection.ingress.new_per_minute:g})",
                "send again later; existing instances are not limited",
            )  # fmt: skip
            return
        task = asyncio.ensure_future(self._accept(entry, event, key, target, found))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settled(self) -> None:
        """Until every event taken so far is accepted (or refused) and answered."""
        while self._tasks:
            await asyncio.gather(*self._tasks)

    async def _accept(
        self,
        entry: ProcessEntry,
        event: AgentEvent,
        key: str,
        target: Address,
        found: ingress.Route,
    ) -> None:
        """Journal, then deliver; the connector hears "accepted" (a rule without `reply`) only
        once the event is durable. A repeat of an idempotency key is answered as the first
        event was: its id, and its reply when the rule asks for one."""
        reply = found.reply
        keep_reply = reply or event.reply_to is None
        routed = msgspec.structs.replace(
            event, instance_key=key, reply_to=event.reply_to if keep_reply else None
        )
        try:
            key_of = event.idempotency_key
            dedupe = f"{entry.address.name}:{key_of}" if key_of else None  # per Connection
            appended = await self.accept(routed, target, dedupe)
        except JournalError as exc:
            self._reject(entry, event, ErrorCode(exc.code), exc.message, exc.suggestion)
            return
        finally:
            # once the event is on its way (or refused): the line (~20 µs, two writes) is not
            # on the path of every connector event to its agent (the edge's first delta)
            log.info("ingress_routed", connection=entry.address.name, event_type=event.type,
                     event_id=event.id, target=str(target), rule=found.rule,
                     reply=reply)  # fmt: skip
        if event.reply_to is None:
            return
        first = appended.entry.event.id if appended is not None and appended.duplicate else None
        if first is not None and reply:
            self._answer_repeat(entry, event, await self._reply_of(first), first)
        elif not reply:
            meta = {"accepted": True, "eventId": first or event.id}
            self._send(entry, response_to(event, source=SOURCE, text="", metadata=meta))

    async def _reply_of(self, event_id: str) -> AgentEvent | None:
        found = await self.acceptor.attach(event_id)
        if found is None:
            return None
        entry, future = found
        return entry.reply if future is None else await future

    def _answer_repeat(
        self, entry: ProcessEntry, request: AgentEvent, answer: AgentEvent | None, first: str
    ) -> None:
        """The first event's reply, for a repeat: re-addressed to this request, and naming the
        first event (the repeat was never accepted: its own id means nothing to the daemon)."""
        if answer is None:
            return
        self._send(entry, response_to(request, source=SOURCE, text=answer.input,
                                      error=answer.error, metadata={"eventId": first}))  # fmt: skip

    def _send(self, entry: ProcessEntry, answer: AgentEvent) -> None:
        self.broker.send(entry, Event(from_=ORCHESTRATOR, to=entry.id_text, payload=answer))

    async def accept(
        self, event: AgentEvent, target: Address, dedupe_key: str | None
    ) -> Appended | None:
        return await self.acceptor.accept(event, target, dedupe_key=dedupe_key)

    def _may_create(self, name: str, rules: ingress.Ingress, target: Address) -> bool:
        rate = rules.new_per_minute
        if rate is None or self.known(target):
            return True
        bucket = self._buckets.get(name)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[name] = TokenBucket(rate, self.clock())
        return bucket.take(self.clock())

    def _reject(
        self,
        entry: ProcessEntry,
        event: AgentEvent,
        code: str,
        message: str,
        suggestion: str | None = None,
    ) -> None:
        log.warning(
            "ingress_rejected",
            connector=str(entry.address),
            event_type=event.type,
            event_id=event.id,
            code=code,
            reason=message,
        )
        if event.reply_to is None:
            return
        error = ErrorInfo(code=code, message=message, suggestion=suggestion)
        answer = response_to(event, source=SOURCE, text="", error=error)
        self.broker.send(entry, Event(from_=ORCHESTRATOR, to=entry.id_text, payload=answer))
