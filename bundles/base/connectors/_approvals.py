"""Approvals from chat: what the `telegram` and `slack` connectors share (ARCHITECTURE.md §10).

When a turn that came from a chat stops at a tool that needs a person's approval, the emit's
answer carries the `goondan.approve` JSON-RPC request. The connector posts it to the same chat
with two buttons (Telegram inline keyboard, Slack block actions) whose data is a short token,
kept with the call id and the chat in `approvals.json` of the connector's state directory (a
press after a connector restart still finds its call). A press counts only from that chat and
from a user the Connection's `config.approvers` lists (by id or name; a Connection that lists
none takes no decision from its chat). The decision goes to the orchestrator as a
`deferred.answer` event naming that approver (`answeredBy`), which the orchestrator checks
against the same list and records as `by`; its reply is the resumed turn's answer, which the
connector posts to the chat. A request
decided elsewhere (`goondan calls approve|deny`, Studio, a webhook's `/rpc`) ends the same way:
the orchestrator hands the resumed turn's reply to the connector (`ctx.on_resumed`), which
finds the chat by the call id (`Pending.take_call`) and posts it there.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from bundles.sdk import ConnectorContext, ConnectorReply, load_sibling

chatbot = load_sibling(__file__, "_chatbot")
APPROVE_METHOD = "goondan.approve"
ANSWER_EVENT = "deferred.answer"
ANSWERED_BY = "answeredBy"
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
    """`config.approvers`: user ids or names allowed to decide (empty: no one in the chat)."""
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

    def take_call(self, call_id: str | None) -> dict[str, Any] | None:
        """The record of `call_id`, decided elsewhere, dropped: its buttons no longer count."""
        for token, record in list(self.items.items()):
            if record.get("callId") == call_id:
                self.drop(token)
                return record
        return None


def refusal(
    record: dict[str, Any] | None, chat: str, user_ids: Iterable[str], allowed: frozenset[str]
) -> str | None:
    """Why this press may not decide (None: it may)."""
    if record is None:
        return "this request is no longer pending"
    if record.get("chat") != chat:
        return "this request belongs to another chat"
    if not allowed:
        return "no one may decide requests here (the Connection lists no config.approvers)"
    if principal(user_ids, allowed) is None:
        return "you may not decide this request"
    return None


def principal(user_ids: Iterable[str], allowed: frozenset[str]) -> str | None:
    """The entry of `config.approvers` that names this user (their id first, then name)."""
    return next((u for u in user_ids if u and u in allowed), None)


Where = dict[str, Any]
"""Where in the chat to post (the connector's own props: chat, thread, message)."""


async def on_resumed(
    ctx: ConnectorContext,
    pending: Pending,
    reply: ConnectorReply,
    where: Callable[[dict[str, Any]], Where],
    ask: Callable[[Where, Mapping[str, Any]], Awaitable[None]],
    post: Callable[[Where, str], Awaitable[None]],
) -> None:
    """A turn from this connector's chat whose approval was decided elsewhere (`goondan
    calls`, Studio, a webhook): its reply goes to the chat (`where` of the request's record),
    as after a press; a resumed turn that asks again gets new buttons."""
    record = pending.take_call(reply.resumed_call)
    if record is None:
        ctx.logger.info("approval_resumed_unknown", call_id=reply.resumed_call)
        return
    if reply.deferred is not None and is_approval(reply.deferred):
        await ask(where(record), reply.deferred)
        return
    if reply.error_code is not None:
        ctx.logger.error("approval_resumed_turn_failed", call_id=reply.resumed_call,
                         code=reply.error_code, message=reply.error_message)  # fmt: skip
        return
    if reply.text.strip():
        await post(where(record), reply.text)


async def decide(
    ctx: ConnectorContext, call_id: str, approved: bool, by: str, wait_s: float
) -> str | None:
    """Send the decision of the approver `by` (an entry of `config.approvers`); the resumed
    turn's reply text (None when there is none)."""
    if approved:
        rpc: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id,
                               "result": {"approved": True, "by": by}}  # fmt: skip
    else:
        error = {"code": PERMISSION_DENIED, "message": f"denied in chat by {by}",
                 "data": {"by": by}}  # fmt: skip
        rpc = {"jsonrpc": "2.0", "id": call_id, "error": error}
    try:
        async with asyncio.timeout(wait_s):
            reply = await ctx.emit(ANSWER_EVENT, {"rpc": rpc, ANSWERED_BY: by}, "")
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
