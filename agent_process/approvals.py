"""Approvals: a tool call a person must allow before it runs (ARCHITECTURE.md §10).

A Tool export with `approval: required` (or `approval: {when, message, ttlSeconds}`, `when` a
JSON Schema over the arguments) does not run at once: the tool-call runner asks the deferred
hook for a `goondan.approve` call (params `{tool, arguments, message}`), so the request is a
pending client-side call like any other: saved under `pending-calls/`, listed by `goondan calls
list`, kept across restarts, expired by its TTL. The answer decides:

- `{approved: true, by, via, at}` (`goondan calls approve`, a chat button, a JSON-RPC result):
  the handler runs and its result is the call's result;
- a JSON-RPC error (`goondan calls deny`: -32001) or anything else: the model gets
  `E_TOOL_PERMISSION_DENIED` (an expiry keeps `E_TOOL_DEFERRED_EXPIRED`), and the handler
  never runs.

Each request and decision is a `tool.approval` runtime event (who, when, how, the decision).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from agent_process.results import (
    DeferredRequest,
    ResultStatus,
    ToolResult,
    error_result,
    ok_result,
)
from bundles.kinds import ApprovalSpec, ToolSpec
from bundles.model import Resource
from protocol.errors import ErrorCode
from protocol.jsonrpc import APPROVE_METHOD, JsonRpcResponse
from protocol.jsontypes import JsonObject


@dataclass(frozen=True, slots=True)
class Approval:
    """One export's rule: `when` (None: every call) and the message shown to the person."""

    message: str | None = None
    when: Draft202012Validator | None = None
    ttl_seconds: float | None = None

    def applies(self, args: Any) -> bool:
        return self.when is None or bool(self.when.is_valid(args))

    def request(self, tool: str, args: Any) -> DeferredRequest:
        message = self.message or f"{tool} wants to run; approve or deny"
        params: JsonObject = {"tool": tool, "arguments": args, "message": message}
        return DeferredRequest(method=APPROVE_METHOD, params=params, message=message)


def approvals_of(tools: Iterable[Resource[ToolSpec]]) -> dict[str, Approval]:
    """`<Tool>__<export>` -> its approval rule, for the agent's resolved Tool resources (their
    overrides applied)."""
    rules: dict[str, Approval] = {}
    for res in tools:
        for export in res.spec.exports:
            spec = export.approval
            if spec is None:
                continue
            rule = Approval()
            if isinstance(spec, ApprovalSpec):
                when = Draft202012Validator(spec.when) if spec.when is not None else None
                rule = Approval(spec.message, when, spec.ttl_seconds)
            rules[f"{res.name}__{export.name}"] = rule
    return rules


def answer_record(answer: JsonRpcResponse) -> ToolResult:
    """The client's answer to a `goondan.approve` call as a decision record (never checked
    against the tool's resultSchema): `{approved, by, via, at, message?, code?}`."""
    if answer.error is None:
        result = answer.result
        approved = result is True or (isinstance(result, dict) and result.get("approved") is True)
        record: JsonObject = dict(result) if isinstance(result, dict) else {}
        return ok_result({**record, "approved": approved})
    data = answer.error.data if isinstance(answer.error.data, dict) else {}
    return ok_result(
        {**data, "approved": False, "code": answer.error.code, "message": answer.error.message}
    )


def decided(answer: ToolResult, tool: str) -> ToolResult | None:
    """None when the person approved (run the handler); else the result the model gets."""
    if answer.status is not ResultStatus.OK:
        return answer  # expired (E_TOOL_DEFERRED_EXPIRED), or the answer could not be read
    output = answer.output if isinstance(answer.output, dict) else {}
    if output.get("approved") is True:
        return None
    why = output.get("message") or "no reason given"
    by = output.get("by") or "the person asked"
    return error_result(
        ErrorCode.E_TOOL_PERMISSION_DENIED,
        f"{by} denied {tool}: {why}",
        suggestion="do not retry; continue without it, or ask the user what to do instead",
    )


def record(answer: ToolResult) -> JsonObject:
    """What the `tool.approval` runtime event says about a decision: who, how, when."""
    if answer.status is not ResultStatus.OK:
        code = answer.error.code if answer.error is not None else None
        expired = code == ErrorCode.E_TOOL_DEFERRED_EXPIRED
        return {"decision": "expired" if expired else "failed", "error": code}
    output = answer.output if isinstance(answer.output, dict) else {}
    data: JsonObject = {"decision": "approved" if output.get("approved") is True else "denied"}
    data.update({k: output[k] for k in ("by", "via", "at", "message") if k in output})
    return data
