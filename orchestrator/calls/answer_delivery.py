"""How a recorded answer reaches its agent, and the resumed turn's reply its clients
(ARCHITECTURE.md §10).

An answer goes to the owning process in the frame `call op=deferred_resolve {id, answer}`: at
once when the process is ready, else when it is (`on_ready`: a new process gets every answer
the answer book holds for its calls, and resumes the turn with them; it reads none from
files). The turn's request is re-opened first, so the resumed turn's reply reaches whoever
waits for it, and the connector the turn came from when someone else answered.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import msgspec
import structlog

from orchestrator.calls.answers import AnswerBook, Answered
from orchestrator.routing.broker import RequestBroker, Targets
from orchestrator.supervision.mailboxes import OpenRequest
from orchestrator.supervision.table import ProcessEntry
from protocol.endpoints import path_segment
from protocol.errors import ProtocolError
from protocol.events import AgentEvent
from protocol.ids import CONTROL, ORCHESTRATOR, Address, ProcessKind, agent_address, parse_address
from protocol.jsonrpc import PENDING_SUFFIX, RESUMED_CALL, PendingCall
from protocol.jsontypes import JsonObject
from protocol.messages import Call, CallOp, CallPayload, Event

log = structlog.get_logger("goondan.deferred")


class CallDelivery:
    def __init__(
        self,
        broker: RequestBroker,
        targets: Targets,
        book: AnswerBook,
        pending_dir: Callable[[str, str], Path],
    ) -> None:
        self.broker = broker
        self.targets = targets
        self.book = book
        self._pending_dir = pending_dir
        """(agent, instanceKey) -> its `pending-calls/`."""
        self._held: dict[Address, dict[str, bool]] = {}
        """Resolutions for a process that is not ready yet, sent when it is: call id ->
        whether the answer streams."""

    def sweep(self, address: Address) -> list[Answered]:
        """The answers of `address` whose call still waits; the others (the turn took them
        and removed the call's file) are dropped."""
        directory = self._pending_dir(address.name, address.instance_key)
        kept = []
        for answered in self.book.of(address):
            if (directory / (path_segment(answered.call_id) + PENDING_SUFFIX)).exists():
                kept.append(answered)
            else:
                self.book.drop(address, answered.call_id)
                log.info("deferred_answer_swept", call_id=answered.call_id, target=str(address))
        return kept

    def reopen(self, call: PendingCall, wait: bool, via: str) -> asyncio.Future[AgentEvent] | None:
        """Re-open the turn's request so its reply reaches a waiter (the resolving client)
        and the connector the turn came from (whoever resolved it); the waiter, if the
        resolving client waits."""
        event = msgspec.convert(call.event, AgentEvent)
        if event.reply_to is None:
            return None
        control = wait or event.reply_to.target == CONTROL
        origin = connector_of(event.reply_to.target)
        elsewhere = origin is not None and via != f"{ProcessKind.CONNECTOR}:{origin.name}"
        waiter = asyncio.get_running_loop().create_future() if control or elsewhere else None
        server = agent_address(call.agent, call.instance_key)
        self.broker.open_request(OpenRequest.of(event, event.reply_to, server, waiter))
        if waiter is not None and origin is not None and elsewhere:
            waiter.add_done_callback(partial(self._to_origin, origin, call.id))
        return waiter if control else None

    def _to_origin(self, origin: Address, call_id: str, done: asyncio.Future[AgentEvent]) -> None:
        """The resumed turn's reply, answered elsewhere, goes to the connector it came from."""
        if done.cancelled() or done.exception() is not None:
            return
        reply = done.result()
        reply = msgspec.structs.replace(reply, metadata={**reply.metadata, RESUMED_CALL: call_id})
        entry = self.broker.ready(origin)
        if entry is None:
            log.info("resumed_reply_origin_gone", call_id=call_id, connector=str(origin))
            return
        self.broker.send(entry, Event(from_=ORCHESTRATOR, to=entry.id_text, payload=reply))
        log.info("resumed_reply_to_origin", call_id=call_id, connector=str(origin))

    def route(self, address: Address, call_id: str, stream: bool) -> None:
        """`stream`: the answer asked for the resumed turn's deltas (a connector's streaming
        request; they go under the turn's first request, whose connector waits)."""
        entry = self.broker.ready(address)
        if entry is not None:
            for answered in self.book.of(address):
                if answered.call_id == call_id:
                    self._hand(entry, answered, stream)
            return
        self._held.setdefault(address, {})[call_id] = stream
        self.targets.ensure(address)  # a new process resumes the turn with its answers

    def on_ready(self, address: Address) -> None:
        """A process of `address` is ready: it gets every answer recorded for its calls (a
        process that resumes a turn takes its answers only from here, never from files)."""
        held = self._held.pop(address, {})
        if not self.book.has_any(address):
            return
        entry = self.broker.ready(address)
        if entry is None:
            return
        for answered in self.sweep(address):
            self._hand(entry, answered, held.get(answered.call_id, False))

    def _hand(self, entry: ProcessEntry, answered: Answered, stream: bool = False) -> None:
        args: JsonObject = {"id": answered.call_id, "answer": msgspec.to_builtins(answered.answer)}
        if stream:
            args["stream"] = True
        payload = CallPayload(call_id=uuid.uuid4().hex, op=CallOp.DEFERRED_RESOLVE, args=args)
        self.broker.send(entry, Call(from_=ORCHESTRATOR, to=entry.id_text, payload=payload))
        if answered.approval:  # spent: never handed twice (call_answers.py)
            self.book.drop(entry.address, answered.call_id)


def connector_of(target: str) -> Address | None:
    """The connector a `replyTo.target` names (None: a control client, an agent)."""
    try:
        address = parse_address(target)
    except ProtocolError:
        return None
    return address if address.kind is ProcessKind.CONNECTOR else None
