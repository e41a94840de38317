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
(`thread_ts` = its threadTs, else its ts). With `streamReplies` (default true) it is written
while the agent works: posted with the first text, updated as more arrives (chat.update at
most once per `editIntervalMs`, default 1000), a last update with the whole reply, and a
status line naming the tool while one runs (`_draft.py`).

Secrets: `signingSecret` (required: a start error without it) and `botToken` (xoxb-...).

The signature is made by slack_sdk's `SignatureVerifier` (the window, `maxSkewSeconds`, is
checked here). The Web API calls are httpx posts (`_chatbot.call_json`): slack_sdk's async
client needs aiohttp, a second HTTP stack, and its sync client blocks on urllib.
"""

from __future__ import annotations

import hmac
import json
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx
from slack_sdk.signature import SignatureVerifier
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bundles.sdk import ConnectorContext, ConnectorReply, load_sibling

guard = load_sibling(__file__, "_httpguard")
http = load_sibling(__file__, "_http")
chatbot = load_sibling(__file__, "_chatbot")
drafts = load_sibling(__file__, "_draft")
approvals = load_sibling(__file__, "_approvals")
EVENT_PATHS = ("/", "/slack/events")
MAX_TEXT = 3000
SEEN_EVENTS = 1000
ACTIONS_PATH = "/slack/actions"
ACTION_ID = "goondan_approval"


def check_signature(
    secret: str | bytes, headers: Mapping[str, str], body: bytes, max_skew: float, now: float
) -> None:
    """Raise guard.HttpError(401) unless Slack's v0 signature fits (constant time).

    slack_sdk's SignatureVerifier makes the signature; the window is checked here, because
    its `is_valid` has a fixed 300 s one and `maxSkewSeconds` is a setting."""
    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    # isascii: str.isdigit also takes digits int() refuses ("²")
    if not (stamp.isascii() and stamp.isdigit()) or not signature.startswith("v0="):
        raise guard.HttpError(401, "E_SLACK_SIGNATURE", "missing X-Slack-Signature/Timestamp")
    if abs(now - int(stamp)) > max_skew:
        raise guard.HttpError(401, "E_SLACK_SIGNATURE", "the request timestamp is too old")
    key = secret.decode() if isinstance(secret, bytes) else secret
    try:
        expected = SignatureVerifier(key).generate_signature(timestamp=stamp, body=body)
    except UnicodeDecodeError:  # it signs text: a body Slack never sends
        expected = None
    given = signature.strip().lower().encode()
    if expected is None or not hmac.compare_digest(expected.encode(), given):
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
        if not secret or not secret.strip():
            raise RuntimeError(
                "the slack connector needs the Connection secret signingSecret "
                "(Slack app > Basic Information > Signing Secret)"
            )
        self.ctx = ctx
        self.secret = secret
        self.token = chatbot.bot_token(ctx, "slack", "SLACK_BOT_TOKEN")
        self.api = str(cfg.get("apiBaseUrl") or "https://slack.com/api").rstrip("/")
        self.host = str(cfg.get("host", "127.0.0.1"))
        self.port = int(cfg.get("port", 3000))
        self.event = str(cfg.get("event", "slack_message"))
        self.types = chatbot.names(cfg.get("eventTypes", ["message"]))
        self.max_skew = float(cfg.get("maxSkewSeconds", 300))
        self.limits = http.Limits.of(cfg, "E_SLACK")
        self.reply_timeout = int(cfg.get("replyTimeoutMs", 300_000)) / 1000
        self.stream = chatbot.flag(cfg.get("streamReplies", True))
        self.edit_interval = int(cfg.get("editIntervalMs", 1000)) / 1000
        self.client = httpx.AsyncClient(
            timeout=int(cfg.get("timeoutMs", 30_000)) / 1000, trust_env=False,
            headers={"Authorization": f"Bearer {self.token}"},
        )  # fmt: skip
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.tasks = chatbot.Conversations()
        self.pending = approvals.Pending(ctx)
        self.approvers = approvals.approvers(cfg)

    def app(self) -> Starlette:
        async def health(_: Request) -> Response:
            return JSONResponse({"ok": True})

        async def not_found(_: Request, exc: Exception) -> Response:
            where = " or ".join((*EVENT_PATHS, ACTIONS_PATH))
            return JSONResponse(_error(404, "E_SLACK_NOT_FOUND", f"POST to {where}")[1], 404)

        routes = [Route("/healthz", health, methods=["GET"])]
        routes += [Route(p, self.answer, methods=["POST"]) for p in EVENT_PATHS]
        routes.append(Route(ACTIONS_PATH, self.actions, methods=["POST"]))
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
        draft = drafts.Draft(_Thread(self, props), interval=self.edit_interval,
                             logger=self.ctx.logger)  # fmt: skip
        text = await chatbot.agent_reply(
            self.ctx,
            self.event,
            props,
            self.reply_timeout,
            kind="slack",
            channel=props["channel"],
            idempotency_key=f"event:{props['eventId']}" if props.get("eventId") else None,
            on_approval=lambda request: self.ask(props, request),
            on_delta=draft.on_delta if self.stream else None,
        )
        await draft.finish(text)

    async def post(self, props: dict[str, Any], text: str) -> None:
        """A reply that comes whole (after an approval): posted in the thread, in pieces."""
        thread = _Thread(self, props)
        await drafts.Draft(thread, interval=self.edit_interval, logger=self.ctx.logger).finish(text)

    async def call_api(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = await chatbot.call_json(
            self.client, f"{self.api}/{method}", method, body, secret=self.token
        )
        return answer

    # -- approvals (ARCHITECTURE.md §10): block action buttons in the message's thread ------

    async def ask(self, props: dict[str, Any], request: Mapping[str, Any]) -> None:
        thread = props.get("threadTs") or props.get("ts")
        token = self.pending.add(str(request.get("id")), props["channel"], threadTs=thread)
        text = approvals.prompt_text(request)
        buttons = [_button("Approve", f"{token}:y", "primary"),
                   _button("Deny", f"{token}:n", "danger")]  # fmt: skip
        blocks = [{"type": "section", "text": {"type": "plain_text", "text": text[:MAX_TEXT]}},
                  {"type": "actions", "elements": buttons}]  # fmt: skip
        body = {"channel": props["channel"], "text": text[:MAX_TEXT], "thread_ts": thread,
                "blocks": blocks}  # fmt: skip
        await self._api("chat.postMessage", body)

    async def actions(self, request: Request) -> Response:
        """`POST /slack/actions` (the app's Interactivity Request URL), signed like events."""
        body = await request.body()
        try:
            check_signature(self.secret, request.headers, body, self.max_skew, time.time())
        except guard.HttpError as exc:
            self.ctx.logger.warning("slack_refused", status=exc.status, reason=exc.message)
            status, payload = _error(exc.status, exc.code, exc.message)
        else:
            status, payload = self.on_form(body)
        return JSONResponse(payload, status)

    def on_form(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """Slack's interactivity request: `payload=<JSON>`; acknowledged at once."""
        try:
            [raw] = urllib.parse.parse_qs(body.decode())["payload"]
            payload = json.loads(raw)
        except (KeyError, ValueError, UnicodeDecodeError):
            return _error(400, "E_SLACK_BAD_JSON", "the form has no JSON `payload`")
        if isinstance(payload, dict) and payload.get("type") == "block_actions":
            self.tasks.start(self.on_press(payload))
        return 200, {"ok": True}

    async def on_press(self, payload: dict[str, Any]) -> None:
        """A button press: only from the channel of the request (and an approver, if listed)."""
        actions = [a for a in payload.get("actions") or [] if approvals.obj(a).get("action_id")
                   == ACTION_ID]  # fmt: skip
        if not actions:
            return
        token, _, choice = str(actions[0].get("value", "")).partition(":")
        record = self.pending.get(token)
        container, user = (approvals.obj(payload.get(k)) for k in ("container", "user"))
        channel = approvals.obj(payload.get("channel")).get("id")
        channel = str(container.get("channel_id") or channel)
        who = [str(user.get("id", "")), str(user.get("username", ""))]
        why = approvals.refusal(record, channel, who, self.approvers)
        if why is not None or record is None:
            self.ctx.logger.warning("slack_approval_refused", user=who[0], reason=why)
            await self._api("chat.postEphemeral", {"channel": channel, "user": who[0], "text": why})
            return
        self.pending.drop(token)
        approved, by = choice == "y", f"slack:{who[0]}"
        settled = approvals.decision_text(approved, by)
        await self._api("chat.update", {"channel": channel, "ts": container.get("message_ts"),
                                         "text": settled, "blocks": []})  # fmt: skip
        approver = approvals.principal(who, self.approvers) or ""  # what the daemon records
        text = await approvals.decide(self.ctx, record["callId"], approved, approver,
                                      self.reply_timeout)  # fmt: skip
        if text is not None:
            await self.post({"channel": channel, "threadTs": record.get("threadTs")}, text)

    async def on_resumed(self, reply: ConnectorReply) -> None:
        """The reply of a turn whose approval was decided elsewhere: to its thread."""
        await approvals.on_resumed(
            self.ctx, self.pending, reply,
            lambda r: {"channel": r.get("chat"), "threadTs": r.get("threadTs")},
            self.ask, self.post,
        )  # fmt: skip

    async def _api(self, method: str, body: dict[str, Any]) -> None:
        try:
            await self.call_api(method, body)
        except chatbot.ApiError as exc:
            self.ctx.logger.error("slack_api_failed", method=method, status=exc.status,
                                  error=str(exc))  # fmt: skip

    async def aclose(self) -> None:
        self.tasks.cancel()
        await self.client.aclose()


class _Thread:
    """The thread of one Slack message as a draft's `Chat` (Slack has no typing indicator
    for bots: the draft shows a status line instead)."""

    max_text = MAX_TEXT
    typing = None

    def __init__(self, slack: Slack, props: dict[str, Any]) -> None:
        self.slack = slack
        self.channel = props["channel"]
        self.thread = props.get("threadTs") or props.get("ts")

    async def post(self, text: str) -> Any:
        body = {"channel": self.channel, "text": text, "thread_ts": self.thread}
        return (await self.slack.call_api("chat.postMessage", body)).get("ts")

    async def edit(self, handle: Any, text: str) -> None:
        await self.slack.call_api(
            "chat.update", {"channel": self.channel, "ts": handle, "text": text}
        )


def _button(label: str, value: str, style: str) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": label}, "style": style,
            "action_id": ACTION_ID, "value": value}  # fmt: skip


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
    ctx.on_resumed(slack.on_resumed)
    try:
        await ctx.state["http"].serve()
    finally:
        await slack.aclose()
