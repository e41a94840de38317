"""Approvals from chat: what the `telegram` and `slack` connectors share (ARCHITECTURE.md §10).

When a turn that came from a chat stops at a tool that needs a person's approval, the emit's
answer carries the `goondan.approve` JSON-RPC request. The connector posts it to the same chat
with two buttons (Telegram inline keyboard, Slack block actions) whose data is a short token,
kept with the call id and the chat in `approvals.json` of the connector's state directory (a
press after a connector restart still finds its call). A press counts only from that chat, and,
when the Connection's `config.approvers` lists user ids or names, only from one of them. The
decision goes to the orchestrator as a `deferred.answer` event (like the webhook's `POST /rpc`),
whose reply is the resumed turn's answer, which the connector posts to the chat.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterable
from typing import Any

from bundles.sdk import ConnectorContext, load_sibling

chatbot = load_sibling(__file__, "_chatbot")
APPROVE_METHOD = "goondan.approve"
ANSWER_EVENT = "deferred.answer"
PERMISSION_DENIED = -32001
MAX_ARGUMENTS_CHARS = 1500


def obj(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (payloads from outside)."""
    return value if isinstance(value, dict) else {}


def is_approval(request: Any) -> bool:
    return isinstance(request, dict) and request.get("method") == APPROVE_METHOD


def prompt_text(request: dict[str, Any]) -> str:
    params = obj(request.get("params"))
    args = json.dumps(params.get("arguments", {}), ensure_ascii=False, indent=1)
    if len(args) > MAX_ARGUMENTS_CHARS:
        args = args[:MAX_ARGUMENTS_CHARS] + " …"
    message = params.get("message") or "A tool wants to run."
    return f"Approval needed: {params.get('tool', '?')}\n{message}\n{args}"


def decision_text(approved: bool, by: str) -> str:
    return f"{'Approved' if approved else 'Denied'} by {by}"


def approvers(config: Any) -> frozenset[str]:
    """`config.approvers`: user ids or names allowed to decide (empty: anyone in the chat)."""
    raw = config.get("approvers") if hasattr(config, "get") else None
    return chatbot.names(raw) if raw else frozenset()


class Pending:
    """token -> {callId, chat, ...}: the approvals this connector posted and not yet decided."""

    def __init__(self, ctx: ConnectorContext) -> None:
        self.file = chatbot.StateFile(ctx, "approvals.json")
        self.items: dict[str, dict[str, Any]] = self.file.load()

    def add(self, call_id: str, chat: str, **where: Any) -> str:
        token = secrets.token_hex(6)  # fits Telegram's 64-byte callback data with room
        self.items[token] = {"callId": call_id, "chat": chat, **where}
        self.file.save(self.items)
        return token

    def get(self, token: str) -> dict[str, Any] | None:
        return self.items.get(token)

    def drop(self, token: str) -> None:
        if self.items.pop(token, None) is not None:
            self.file.save(self.items)


def refusal(
    record: dict[str, Any] | None, chat: str, user_ids: Iterable[str], allowed: frozenset[str]
) -> str | None:
    """Why this press may not decide (None: it may)."""
    if record is None:
        return "this request is no longer pending"
    if record.get("chat") != chat:
        return "this request belongs to another chat"
    if allowed and not allowed & {u for u in user_ids if u}:
        return "you may not decide this request"
    return None


async def decide(
    ctx: ConnectorContext, call_id: str, approved: bool, by: str, wait_s: float
) -> str | None:
    """Send the decision; the resumed turn's reply text (None when there is none)."""
    if approved:
        rpc: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id,
                               "result": {"approved": True, "by": by}}  # fmt: skip
    else:
        error = {"code": PERMISSION_DENIED, "message": f"denied in chat by {by}",
                 "data": {"by": by}}  # fmt: skip
        rpc = {"jsonrpc": "2.0", "id": call_id, "error": error}
    try:
        async with asyncio.timeout(wait_s):
            reply = await ctx.emit(ANSWER_EVENT, {"rpc": rpc}, "")
    except TimeoutError:
        ctx.logger.error("approval_reply_timeout", call_id=call_id)
        return None
    if reply is None:
        return None
    if reply.error_code is not None:
        ctx.logger.error("approval_answer_refused", call_id=call_id, code=reply.error_code,
                         message=reply.error_message)  # fmt: skip
        return None
    return reply.text if reply.text.strip() else None
