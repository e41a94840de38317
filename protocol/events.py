"""Payload Structs that travel inside `event` frames: AgentEvent and its parts.

Wire Structs tolerate unknown fields (msgspec ignores them by default) and every field added
later gets a default, so an older peer can read a newer frame.
"""

from __future__ import annotations

import time
import uuid
from enum import StrEnum

import msgspec

from protocol.errors import ErrorInfo
from protocol.jsontypes import JsonObject
from protocol.trace import new_span_id, new_trace_id


class SourceKind(StrEnum):
    AGENT = "agent"
    CONNECTOR = "connector"
    CLI = "cli"
    ORCHESTRATOR = "orchestrator"


class Source(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Who produced an event. For agents and connectors, `instance_key` names the instance."""

    kind: SourceKind
    name: str
    instance_key: str | None = None
    properties: JsonObject = msgspec.field(default_factory=dict)


class ReplyTo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Where the final text of the turn goes: `target` is an address, `correlation_id` pairs it."""

    target: str
    correlation_id: str
    stream: bool = False
    """The requester wants the turn's `delta` frames before the reply (protocol.stream)."""


class TraceContext(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """W3C ids: the trace id is created once at the first input and kept across hand-offs."""

    trace_id: str
    span_id: str
    parent_span_id: str | None = None

    @classmethod
    def root(cls) -> TraceContext:
        return cls(trace_id=new_trace_id(), span_id=new_span_id())

    def child(self) -> TraceContext:
        """A new span in the same trace whose parent is this span."""
        return TraceContext(
            trace_id=self.trace_id, span_id=new_span_id(), parent_span_id=self.span_id
        )


class AgentEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One input to (or response from) an agent instance.

    `instance_key` is the instance the event is addressed to; a response keeps the key of the
    instance that answered, and is routed by `metadata["inReplyTo"]` (the correlation id of the
    request) instead. `error` is set when the turn that should have produced it failed.
    """

    id: str
    type: str
    input: str = ""
    instance_key: str
    source: Source
    reply_to: ReplyTo | None = None
    metadata: JsonObject = msgspec.field(default_factory=dict)
    auth: JsonObject | None = None
    trace: TraceContext
    error: ErrorInfo | None = None
    created_at: float = 0.0
    idempotency_key: str | None = None
    """The sender's own key for this input (an `Idempotency-Key` header, a chat update id): a
    repeat within the journal's window is the first event, not a second one."""

    @property
    def in_reply_to(self) -> str | None:
        value = self.metadata.get("inReplyTo")
        return value if isinstance(value, str) else None


def new_event_id() -> str:
    return uuid.uuid4().hex


def new_event(
    *,
    type: str,
    input: str,
    instance_key: str,
    source: Source,
    trace: TraceContext | None = None,
    reply_to: ReplyTo | None = None,
    metadata: JsonObject | None = None,
    auth: JsonObject | None = None,
    idempotency_key: str | None = None,
) -> AgentEvent:
    """Build an event with a fresh id, a timestamp and (unless given) a new root trace."""
    return AgentEvent(
        id=new_event_id(),
        type=type,
        input=input,
        instance_key=instance_key,
        source=source,
        reply_to=reply_to,
        metadata=metadata or {},
        auth=auth,
        trace=trace or TraceContext.root(),
        created_at=time.time(),
        idempotency_key=idempotency_key,
    )


def response_to(
    request: AgentEvent,
    *,
    source: Source,
    text: str,
    error: ErrorInfo | None = None,
    metadata: JsonObject | None = None,
) -> AgentEvent:
    """The response event for a request that carried `reply_to`."""
    assert request.reply_to is not None, "only a request with replyTo has a response"
    meta: JsonObject = dict(metadata or {})
    meta["inReplyTo"] = request.reply_to.correlation_id
    return AgentEvent(
        id=new_event_id(),
        type="agent.response",
        input=text,
        instance_key=request.instance_key,
        source=source,
        metadata=meta,
        auth=request.auth,
        trace=request.trace,
        error=error,
        created_at=time.time(),
    )
