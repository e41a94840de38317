"""What the `telegram` and `slack` connectors share: the bot token, the API error both raise
(`ApiError`: telegram maps python-telegram-bot's errors to it; slack's Web API calls are
`call_json`, whose messages never show the token), an exponential backoff, reply chunking and
a small JSON state file that survives restarts of the connector process.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bundles.sdk import ConnectorContext, StreamDelta, load_sibling
from protocol import backoff
from protocol.durable import write_atomic

# the chat tools' API helper (one Retry-After reading for tools and connectors)
_chatapi = load_sibling(str(Path(__file__).parents[1] / "tools" / "_chatapi.py"), "_chatapi")


class ApiError(Exception):
    """A failed API call: `status` is the HTTP status (0 when no answer came back)."""

    def __init__(self, method: str, status: int, reason: str, retry_after: int | None = None):
        super().__init__(f"{method} failed: {reason} (HTTP {status})")
        self.method = method
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


def bot_token(ctx: ConnectorContext, connector: str, env: str) -> str:
    """`secrets.botToken` of the Connection, else `config.botToken`, else the variable `env`."""
    token = ctx.secrets.get("botToken") or ctx.config.get("botToken") or os.environ.get(env)
    if not isinstance(token, str) or not token.strip():
        raise RuntimeError(
            f"the {connector} connector has no bot token: set the Connection's "
            f"secrets.botToken (e.g. {{valueFrom: {{env: {env}}}}}) or export {env}"
        )
    return token.strip()


def flag(value: Any) -> bool:
    """A boolean setting: a Connection's config values are strings ("false", "0", "no")."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def names(value: Any) -> frozenset[str]:
    """A list setting, or a comma-separated string from a Connection's config."""
    items = value.split(",") if isinstance(value, str) else value
    return frozenset(str(item).strip() for item in items if str(item).strip())


async def call_json(
    client: httpx.AsyncClient,
    url: str,
    method: str,
    body: Mapping[str, Any],
    *,
    secret: str,
    http_timeout: float | None = None,
) -> dict[str, Any]:
    """POST `body` as JSON; the decoded `{ok: true, ...}` object or ApiError (token masked)."""
    try:
        response = await client.post(url, json=dict(body), timeout=http_timeout)
    except httpx.HTTPError as exc:
        reason = f"{type(exc).__name__}: {exc}".replace(secret, "***")
        raise ApiError(method, 0, reason) from None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code < 400 and isinstance(payload, dict) and payload.get("ok") is True:
        return payload
    reason = "unexpected answer"
    if isinstance(payload, dict):
        reason = str(payload.get("description") or payload.get("error") or reason)
    status = response.status_code
    wait_s = _chatapi.retry_after(response, payload)
    raise ApiError(method, status, reason.replace(secret, "***"), wait_s)


class Conversations(set[asyncio.Task[None]]):
    """The conversations a chat connector runs in the background (one per incoming message),
    cancelled when the connector closes."""

    def start(self, conversation: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(conversation)
        self.add(task)
        task.add_done_callback(self.discard)

    def cancel(self) -> None:
        for task in list(self):
            task.cancel()


@dataclass(slots=True)
class Backoff:
    """Delays after consecutive failures: first, doubled each time, capped; reset on success."""

    first: float = 1.0
    cap: float = 60.0
    failures: int = 0

    def next(self, at_least: float = 0.0) -> float:
        """The next delay; `at_least` (a 429's retry_after) lengthens it, up to the cap."""
        wait = backoff.delay(self.failures, first=self.first, cap=self.cap)
        self.failures += 1
        return max(wait, min(at_least, self.cap))

    def reset(self) -> None:
        self.failures = 0


def chunks(text: str, size: int) -> list[str]:
    """`text` cut into pieces of at most `size` characters, preferring line breaks."""
    out: list[str] = []
    while len(text) > size:
        cut = text.rfind("\n", 0, size + 1)  # a break right after a full piece counts
        cut = cut if cut > 0 else size
        out.append(text[:cut])
        text = text[cut:].lstrip("\n")
    if text:
        out.append(text)
    return out


class StateFile:
    """A JSON object in the connector's state directory, written atomically."""

    def __init__(self, ctx: ConnectorContext, name: str) -> None:
        directory = ctx.state_dir
        self.path = directory / name if directory is not None else None

    def load(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def save(self, data: Mapping[str, Any]) -> None:
        if self.path is None:
            return
        write_atomic(Path(self.path), json.dumps(dict(data)).encode())


async def agent_reply(
    ctx: ConnectorContext,
    event: str,
    props: dict[str, Any],
    wait_seconds: float,
    *,
    kind: str,
    idempotency_key: str | None = None,
    on_approval: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None,
    on_delta: Callable[[StreamDelta], None] | None = None,
    **where: Any,
) -> str | None:
    """Hand one chat message to the agent and wait for its text (`on_delta` gets the turn as
    it happens, when given).

    None when there is nothing to send back: the wait timed out, the turn failed, the rule
    asked for no reply, or the answer is blank. Each failure is logged with `where` (the chat).
    A turn that stops for a person's approval goes to `on_approval` (the chat's buttons).
    """
    try:
        async with asyncio.timeout(wait_seconds):
            reply = await ctx.emit(event, props, props["text"], reply=True,
                                   idempotency_key=idempotency_key,
                                   on_delta=on_delta)  # fmt: skip
    except TimeoutError:
        ctx.logger.error(f"{kind}_reply_timeout", **where)
        return None
    if reply is None:
        return None
    if reply.error_code is not None:
        ctx.logger.error(f"{kind}_agent_error", code=reply.error_code,
                         message=reply.error_message, **where)  # fmt: skip
        return None
    request = reply.deferred
    if on_approval is not None and request and request.get("method") == "goondan.approve":
        await on_approval(request)
        return None
    if reply.accepted or not reply.text.strip():
        return None
    return reply.text
