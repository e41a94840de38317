"""`agents__send` on the daemon's side: a `call` frame (op `send`), so that the tool's "accepted"
means what it says: the event was checked like any inter-agent event and journaled before the
call is answered. A bare event frame would return before the daemon had it.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from orchestrator.calls.agents import AgentsService
from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent
from protocol.ids import Address, parse_address
from protocol.jsontypes import JsonObject
from protocol.messages import CallPayload, CallResultPayload

Accept = Callable[[AgentEvent, Address, Callable[[ErrorInfo | None], None]], None]
Reply = Callable[[ProcessEntry, CallResultPayload], None]


class SendCalls:
    def __init__(self, agents: AgentsService, accept: Accept, reply: Reply) -> None:
        self._agents = agents
        self._accept = accept
        self._reply = reply

    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None:
        try:
            event = msgspec.convert(payload.args.get("event"), AgentEvent)
            target = parse_address(str(payload.args.get("to")))
        except (msgspec.ValidationError, ProtocolError) as exc:
            error = ErrorInfo(code=ErrorCode.E_PROTOCOL_DECODE, message=str(exc))
            self._answer(entry, payload, error)
            return
        problem = self._agents.check_route(entry.address, target, event)
        if problem is not None:
            self._answer(entry, payload, problem)
            return
        result = {"eventId": event.id}
        self._accept(event, target, lambda error: self._answer(entry, payload, error, result))

    def _answer(
        self,
        entry: ProcessEntry,
        payload: CallPayload,
        error: ErrorInfo | None,
        result: JsonObject | None = None,
    ) -> None:
        ok = error is None
        answer = CallResultPayload(
            call_id=payload.call_id, ok=ok, result=result if ok else None, error=error
        )
        self._reply(entry, answer)
