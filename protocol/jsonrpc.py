"""JSON-RPC 2.0 messages for deferred (client-side) tool calls, seed 001."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import msgspec

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
    params: dict[str, Any] = msgspec.field(default_factory=dict)


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
