"""JSON-RPC 2.0 messages for deferred (client-side) tool calls, ARCHITECTURE.md §10."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import msgspec

from protocol.jsontypes import JsonObject

JSONRPC_VERSION = "2.0"


class DeferredErrorCode(IntEnum):
    """Client error codes whose meaning the model is told (any other code is passed on too)."""

    PERMISSION_REQUIRED = -32010
    PERMISSION_DENIED = -32001
    USER_CANCELED = -32002


class JsonRpcRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Server -> client: `id` is the tool call id, `method` what the client must do."""

    jsonrpc: str = JSONRPC_VERSION
    id: str
    method: str
    params: JsonObject = msgspec.field(default_factory=dict)


class JsonRpcError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class JsonRpcResponse(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Client -> server: exactly one of `result` or `error`."""

    jsonrpc: str = JSONRPC_VERSION
    id: str
    result: Any = None
    error: JsonRpcError | None = None


class PendingCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A deferred call waiting for its client: `<instance>/pending-calls/<id>.json` on disk.

    Written by the agent process when the call suspends its turn, read by the orchestrator's
    pending-call index (`goondan calls list`) and by a later process of the same instance
    that resumes the turn. The client's answer is never a file the agent reads: the daemon
    keeps it (`StateLayout.answers_dir`) and hands it over in the `deferred_resolve` frame.
    `event` is the originating AgentEvent (its `replyTo` is where the turn's reply goes when
    it resumes).
    """

    id: str
    method: str
    params: JsonObject = msgspec.field(default_factory=dict)
    message: str | None = None
    agent: str
    instance_key: str
    tool_name: str
    turn_id: str
    step: int = 1
    event: JsonObject = msgspec.field(default_factory=dict)
    created_at: float
    expires_at: float

    def request(self) -> JsonRpcRequest:
        return JsonRpcRequest(id=self.id, method=self.method, params=self.params)


PENDING_SUFFIX = ".json"
ANSWER_SUFFIX = ".answer.json"
"""Where an earlier goondan kept an answer next to its call; a file of that name is ignored
now (an agent could have written it)."""

ANSWER_EVENT = "deferred.answer"
"""A connector's event carrying a client's JSON-RPC response to a pending call in
`metadata.rpc`; its reply is the resumed turn's reply."""
ANSWERED_BY = "answeredBy"
"""`metadata` of a connector's `deferred.answer` event: whom the connector authenticated (the
chat user on the Connection's `approvers` who pressed, the name of the API token the client
presented). Set by connector code, never from the client's payload; an approval from a
Connection needs it to be one of the Connection's `approvers` (ARCHITECTURE.md §10)."""
PENDING_CALL = "pendingCall"
"""`metadata` of the reply that tells a client a turn waits on its call: the call's id."""

APPROVE_METHOD = "goondan.approve"
"""The method of a pending call that asks a person to approve a tool call (a Tool export's
`approval:`); its params are `{tool, arguments, message}`."""
RESUMED_CALL = "resumedCall"
"""`metadata` of a resumed turn's reply that the orchestrator passes on to the connector the
turn came from when someone else answered its call (`goondan calls`, Studio, another
connector): the call's id (ARCHITECTURE.md §10)."""


def approval_answer(
    call_id: str,
    *,
    approved: bool,
    by: str,
    via: str,
    at: float,
    message: str | None = None,
) -> JsonRpcResponse:
    """A person's decision on a `goondan.approve` call: `{approved: true, by, via, at}`, or the
    JSON-RPC error -32001 (permission denied) carrying the same record in its data."""
    record: JsonObject = {"by": by, "via": via, "at": at}
    if message:
        record["message"] = message
    if approved:
        return JsonRpcResponse(id=call_id, result={"approved": True, **record})
    error = JsonRpcError(
        code=DeferredErrorCode.PERMISSION_DENIED, message=message or f"denied by {by}", data=record
    )
    return JsonRpcResponse(id=call_id, error=error)
