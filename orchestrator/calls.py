"""Answers to `call` frames from children: runtime operations that are not events.

One small function per op; anything not built yet is a coded E_NOT_IMPLEMENTED reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, assert_never

from orchestrator.table import ProcessTable
from protocol.codec import to_builtins
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.ids import Address, ProcessKind, agent_address, check_instance_key
from protocol.messages import CallOp, CallPayload, CallResultPayload


@dataclass(frozen=True, slots=True)
class CallContext:
    table: ProcessTable
    members: frozenset[str]
    check: Callable[[Address], ErrorInfo | None]
    ensure: Callable[[Address], None]
    caller: Address


def _ok(payload: CallPayload, result: Any) -> CallResultPayload:
    return CallResultPayload(call_id=payload.call_id, ok=True, result=result)


def _err(payload: CallPayload, code: ErrorCode, message: str) -> CallResultPayload:
    return CallResultPayload(
        call_id=payload.call_id, ok=False, error=ErrorInfo(code=code, message=message)
    )


def _spawn(payload: CallPayload, ctx: CallContext) -> CallResultPayload:
    agent = payload.args.get("agent")
    key = payload.args.get("instanceKey") or ctx.caller.instance_key
    if not isinstance(agent, str) or not isinstance(key, str):
        return _err(payload, ErrorCode.E_CONTROL_BAD_REQUEST, "spawn needs agent and instanceKey")
    try:
        target = agent_address(agent, check_instance_key(key))
    except ProtocolError as exc:
        return _err(payload, ErrorCode.E_AGENT_INVALID_INSTANCE_KEY, exc.message)
    problem = ctx.check(target)
    if problem is not None:
        return CallResultPayload(call_id=payload.call_id, ok=False, error=problem)
    ctx.ensure(target)
    return _ok(payload, {"id": str(target), "status": str(ctx.table.entry(target).status)})


def _list(payload: CallPayload, ctx: CallContext) -> CallResultPayload:
    include_all = bool(payload.args.get("includeAll"))
    infos = [
        to_builtins(e.info())
        for e in ctx.table
        if e.address.kind is ProcessKind.AGENT and (include_all or e.live)
    ]
    return _ok(payload, {"agents": infos})


def _catalog(payload: CallPayload, ctx: CallContext) -> CallResultPayload:
    return _ok(payload, {"agents": sorted(ctx.members)})


def answer_call(payload: CallPayload, ctx: CallContext) -> CallResultPayload:
    match payload.op:
        case CallOp.SPAWN:
            return _spawn(payload, ctx)
        case CallOp.LIST:
            return _list(payload, ctx)
        case CallOp.CATALOG:
            return _catalog(payload, ctx)
        case CallOp.RESTART | CallOp.DEFERRED_SUBMIT | CallOp.DEFERRED_RESOLVE:
            return _err(payload, ErrorCode.E_NOT_IMPLEMENTED, f"call {payload.op} is not built yet")
        case _:
            assert_never(payload.op)
