"""The `slack` connector: Slack Events API webhook in, the agent's reply out with
chat.postMessage in the message's thread.

    POST /slack/events (or /)   Events API requests, signed by Slack
    GET  /healthz               200 {"ok": true}

Every POST must carry a valid v0 signature: `X-Slack-Signature: v0=<hex HMAC-SHA256 of
"v0:{X-Slack-Request-Timestamp}:{raw body}" with the signing secret>` and a timestamp within
`maxSkewSeconds` (300) of now; otherwise 401 and nothing is emitted. `url_verification` is
answered with its challenge. An `event_callback` whose event type is in `config.eventTypes`
(["message"]) and that is a plain user message (no subtype, no bot_id) is acknowledged with 200
at once (Slack wants an answer within 3 s and retries otherwise; a retried event_id is
acknowledged and dropped) and then emitted as `config.event` ("slack_message") with
properties `{channel, user, ts, threadTs, text, team, channelType, eventId}`. The recommended
ingress rule: `route: {instanceKeyProperty: channel, instanceKeyPrefix: "slack:"}`. A
non-empty reply is posted with chat.postMessage to the channel, in the thread of the message
(`thread_ts` = its threadTs, else its ts).

Secrets: `signingSecret` (required: a start error without it) and `botToken` (xoxb-...).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bundles.sdk import ConnectorContext, load_sibling

guard = load_sibling(__file__, "_httpguard")
http = load_sibling(__file__, "_http")
chatbot = load_sibling(__file__, "_chatbot")
EVENT_PATHS = ("/", "/slack/events")
MAX_TEXT = 3000
SEEN_EVENTS = 1000


def check_signature(
    secret: bytes, headers: Mapping[str, str], body: bytes, max_skew: float, now: float
) -> None:
    """Raise guard.HttpError(401) unless Slack's v0 signature fits (constant time)."""
    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not stamp.isdigit() or not signature.startswith("v0="):
        raise guard.HttpError(401, "E_SLACK_SIGNATURE", "missing X-Slack-Signature/Timestamp")
    if abs(now - int(stamp)) > max_skew:
        raise guard.HttpError(401, "E_SLACK_SIGNATURE", "the request timestamp is too old")
    base = b"v0:" + stamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.strip().lower().encode()):
        raise guard.HttpError(401, "E_SLACK_SIGNATURE", "the signature does not match")


def message_properties(payload: dict[str, Any], types: frozenset[str]) -> dict[str, Any] | None:
    """The event properties of a user's message event; None for anything to ignore."""
    event = payload.get("event")
    if not isinstance(event, dict) or event.get("type") not in types:
        return None
    if event.get("subtype") or event.get("bot_id"):
        return None  # edits, joins, bot messages (including our own replies)
    text, channel = event.get("text"), event.get("channel")
    if not isinstance(text, str) or not text.strip() or not isinstance(channel, str):
        return None
    return {
        "channel": channel,
        "user": event.get("user"),
        "ts": event.get("ts"),
        "threadTs": event.get("thread_ts"),
        "text": text,
        "team": payload.get("team_id", event.get("team")),
        "channelType": event.get("channel_type"),
        "eventId": payload.get("event_id"),
    }


class Slack:
    def __init__(self, ctx: ConnectorContext) -> None:
        cfg = ctx.config
        secret = ctx.secrets.get("signingSecret")
        if not secret:
            raise RuntimeError(
                "the slack connector needs the Connection secret signingSecret "
                "(Slack app > Basic Information > Signing Secret)"
            )
        self.ctx = ctx
        self.secret = secret.encode()
        self.token = chatbot.bot_token(ctx, "slack", "SLACK_BOT_TOKEN")
        self.api = str(cfg.get("apiBaseUrl") or "https://slack.com/api").rstrip("/")
        self.host = str(cfg.get("host", "127.0.0.1"))
        self.port = int(cfg.get("port", 3000))
        self.event = str(cfg.get("event", "slack_message"))
        self.types = chatbot.names(cfg.get("eventTypes", ["message"]))
        self.max_skew = float(cfg.get("maxSkewSeconds", 300))
        self.limits = http.Limits.of(cfg, "E_SLACK")
        self.reply_timeout = int(cfg.get("replyTimeoutMs", 300_000)) / 1000
        self.client = httpx.AsyncClient(
            timeout=int(cfg.get("timeoutMs", 30_000)) / 1000, trust_env=False,
            headers={"Authorization": f"Bearer {self.token}"},
        )  # fmt: skip
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.tasks = chatbot.Conversations()

    def app(self) -> Starlette:
        async def health(_: Request) -> Response:
            return JSONResponse({"ok": True})

        async def not_found(_: Request, exc: Exception) -> Response:
            where = " or ".join(EVENT_PATHS)
            return JSONResponse(_error(404, "E_SLACK_NOT_FOUND", f"POST to {where}")[1], 404)

        routes = [Route("/healthz", health, methods=["GET"])]
        routes += [Route(p, self.answer, methods=["POST"]) for p in EVENT_PATHS]
        return Starlette(routes=routes, exception_handlers={HTTPException: not_found})

    async def answer(self, request: Request) -> Response:
        try:
            status, payload = await self._answer(request.headers, await request.body())
        except Exception as exc:  # a bug here must not stop the server
            self.ctx.logger.error("slack_failed", error=repr(exc))
            status, payload = _error(500, "E_SLACK_INTERNAL", "internal")
        return JSONResponse(payload, status)

    async def _answer(self, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            check_signature(self.secret, headers, body, self.max_skew, time.time())
            payload = json.loads(body)
        except guard.HttpError as exc:
            self.ctx.logger.warning("slack_refused", status=exc.status, reason=exc.message)
            return _error(exc.status, exc.code, exc.message)
        except (ValueError, UnicodeDecodeError):
            return _error(400, "E_SLACK_BAD_JSON", "the body is not JSON")
        if not isinstance(payload, dict):
            return _error(400, "E_SLACK_BAD_JSON", "the body must be a JSON object")
        if payload.get("type") == "url_verification":
            return 200, {"challenge": payload.get("challenge", "")}
        if payload.get("type") == "event_callback":
            self.dispatch(payload)
        return 200, {"ok": True}

    def dispatch(self, payload: dict[str, Any]) -> None:
        """Start handling a message event in the background: the 200 goes out now."""
        event_id = str(payload.get("event_id", ""))
        if event_id and event_id in self.seen:
            self.ctx.logger.info("slack_retry_dropped", event_id=event_id)
            return
        if event_id:
            self.seen[event_id] = None
            while len(self.seen) > SEEN_EVENTS:
                self.seen.popitem(last=False)
        props = message_properties(payload, self.types)
        if props is None:
            return
        self.tasks.start(self.converse(props))

    async def converse(self, props: dict[str, Any]) -> None:
        text = await chatbot.agent_reply(
            self.ctx,
            self.event,
            props,
            self.reply_timeout,
            kind="slack",
            channel=props["channel"],
            idempotency_key=f"event:{props['eventId']}" if props.get("eventId") else None,
        )
        if text is not None:
            await self.post(props, text)

    async def post(self, props: dict[str, Any], text: str) -> None:
        thread = props.get("threadTs") or props.get("ts")
        for piece in chatbot.chunks(text, MAX_TEXT):
            body = {"channel": props["channel"], "text": piece, "thread_ts": thread}
            try:
                await chatbot.call_json(self.client, f"{self.api}/chat.postMessage",
                                        "chat.postMessage", body, secret=self.token)  # fmt: skip
            except chatbot.ApiError as exc:
                self.ctx.logger.error("slack_send_failed", channel=props["channel"],
                                      status=exc.status, error=str(exc))  # fmt: skip
                return

    async def aclose(self) -> None:
        self.tasks.cancel()
        await self.client.aclose()


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"code": code, "message": message}}


async def start(ctx: ConnectorContext) -> None:
    """Bind before `ready`: a port in use (or a missing secret) is a start error."""
    slack = Slack(ctx)
    listener = http.HttpServer(slack.limits)
    await listener.bind(slack.host, slack.port)
    listener.mount(slack.app())
    ctx.state["slack"], ctx.state["http"] = slack, listener
    host, port = listener.address
    ctx.logger.info("slack_listening", addresses=[f"{host}:{port}"])


async def run(ctx: ConnectorContext) -> None:
    slack: Slack = ctx.state["slack"]
    try:
        await ctx.state["http"].serve()
    finally:
        await slack.aclose()
