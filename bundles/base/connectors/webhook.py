"""The `webhook` connector: HTTP POST in, the agent's reply out (served by `_http.py`).

    POST /events (or /)   {"event"?, "text" | "input", "properties"?, "instanceKey"?}
    POST /rpc             a client's JSON-RPC 2.0 response {jsonrpc, id, result | error}
                          (only with a signingSecret, signed: even on loopback)
    GET  /healthz         200 {"ok": true}

The body's `event` (default `config.defaultEvent`, "message") names the connector event the
Connection's ingress rules match; `properties` are matched by the rules and may name the
instance (`instanceKeyProperty`); `instanceKey` is copied into `properties.instanceKey` (a
rule uses it only if it says `instanceKeyProperty: instanceKey`). Every POST must be JSON
(`Content-Type: application/json`), carry no browser `Origin` (unless `allowedOrigins` lists
it) and a `Host` that is an IP literal, `localhost` or in `allowedHosts` (`_httpguard.py`).
With the Connection secret `signingSecret`, every POST must also be signed:
`X-Goondan-Timestamp: <unix seconds>` and `X-Goondan-Signature: sha256=<hex HMAC-SHA256 of
"<timestamp>.<raw body>">`, at most `signatureMaxAgeSeconds` (300) old and never used before
(401/409 otherwise). A server bound beyond loopback must have a secret (or
`allowUnsigned: true`). Answers: 200 {"reply", "eventId"} when the rule asks for a reply,
202 {"accepted": true, "eventId"} when it does not, 4xx/5xx {"error": {"code", "message"}}.
Size, header and time limits are `_http.py`'s (keep-alive and chunked bodies work).

Deferred (client-side) tools, ARCHITECTURE.md §10: when the turn suspends on a tool that must run on
the client, the answer is 200 {"rpc": {jsonrpc, id, method, params}, "eventId"}; the client runs it
and POSTs its JSON-RPC response to `/rpc` (signed like any POST); that request's answer is the
resumed turn's reply, 200 {"reply", "eventId"} (or 202 when nobody waits for the turn).
An answer decides a call, an approval too, so `/rpc` needs the Connection secret
`signingSecret` on every interface (loopback is shared by every user of the machine, and
`allowUnsigned` does not cover it): without one it answers 403 `E_CONNECTOR_UNSIGNED`. The
event an answer becomes, `deferred.answer`, is no `event` a body of `/events` may name (400).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bundles.sdk import ConnectorContext, load_sibling
from protocol.errors import ErrorCode
from protocol.private import private_dir

guard = load_sibling(__file__, "_httpguard")
http = load_sibling(__file__, "_http")
HttpError = guard.HttpError
EVENT_PATHS = ("/", "/events")
_STATUS_OF = {"E_CONNECTOR_NO_ROUTE": 422, "E_AGENT_CAPACITY": 429, "E_CALL_NOT_FOUND": 404,
              "E_AGENT_BUDGET_EXCEEDED": 429, "E_CALL_FORBIDDEN": 403}  # fmt: skip
"""HTTP status of a coded error the daemon answered with (anything else: 502)."""
RPC_PATH = "/rpc"
RPC_EVENT = "deferred.answer"
UNSIGNED_RPC = (
    "POST /rpc answers a pending call (an approval too), so it must be signed, even on "
    "loopback: set the Connection secret signingSecret and send X-Goondan-Timestamp and "
    "X-Goondan-Signature (config.allowUnsigned does not cover /rpc)"
)


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8787
    limits: Any = None
    """`_http.Limits`: body and header sizes, read and write deadlines."""
    timeout: float = 60.0
    default_event: str = "message"
    signing_secret: bytes | None = field(default=None, repr=False)
    signature_max_age: float = 300.0
    browser: Any = None
    """`_httpguard.BrowserPolicy`: the origins and host names this server answers."""
    allow_unsigned: bool = False

    @classmethod
    def of(cls, ctx: ConnectorContext) -> Settings:
        cfg = ctx.config
        secret = ctx.secrets.get("signingSecret")
        return cls(
            host=str(cfg.get("host", "127.0.0.1")),
            port=int(cfg.get("port", 8787)),
            limits=http.Limits.of(cfg, "E_WEBHOOK"),
            timeout=int(cfg.get("timeoutMs", 60_000)) / 1000,
            default_event=str(cfg.get("defaultEvent", "message")),
            signing_secret=secret.encode() if secret else None,
            signature_max_age=float(cfg.get("signatureMaxAgeSeconds", guard.DEFAULT_MAX_AGE)),
            browser=guard.BrowserPolicy.of(cfg),
            allow_unsigned=guard.flag(cfg, "allowUnsigned"),
        )


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"code": code, "message": message}}


def parse_body(body: bytes, default_event: str) -> tuple[str, dict[str, Any], str]:
    """(event, properties, text) from a JSON body; HttpError(400) saying what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, "E_WEBHOOK_BAD_JSON", f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "the body must be a JSON object")
    event = data.get("event", default_event)
    text = data.get("text", data.get("input", ""))
    properties = data.get("properties", {})
    key = data.get("instanceKey")
    if not isinstance(event, str) or not event:
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "`event` must be a non-empty string")
    if event == RPC_EVENT:  # the daemon takes this event as an answer: only /rpc, signed
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", f"`event` {RPC_EVENT!r} is reserved: "
                        f"answer a pending call on POST {RPC_PATH} (signed)")  # fmt: skip
    if not isinstance(text, str):
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "`text` (or `input`) must be a string")
    if not text.strip() and not properties and key is None:
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "the body has no `text` (or `input`) "
                        "and no `properties`: there is nothing for the agent")  # fmt: skip
    if not isinstance(properties, dict):
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "`properties` must be a JSON object")
    if key is not None:
        if not isinstance(key, str):
            raise HttpError(400, "E_WEBHOOK_BAD_BODY", "`instanceKey` must be a string")
        properties.setdefault("instanceKey", key)
    return event, properties, text


def parse_rpc(body: bytes) -> dict[str, Any]:
    """A JSON-RPC 2.0 response object; HttpError(400) saying what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, "E_WEBHOOK_BAD_JSON", f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "a JSON-RPC response needs a string `id`")
    if ("result" in data) == ("error" in data):
        raise HttpError(400, "E_WEBHOOK_BAD_BODY", "send exactly one of `result` or `error`")
    return data


class WebhookServer:
    def __init__(self, ctx: ConnectorContext, settings: Settings, now: float) -> None:
        self.ctx = ctx
        self.settings = settings
        state = ctx.state_dir
        if state is not None:
            private_dir(state)
        path = state / "replay.jsonl" if state is not None else None
        self.replays = guard.ReplayCache(settings.signature_max_age, path, now)

    def app(self) -> Starlette:
        async def health(_: Request) -> Response:
            return JSONResponse({"ok": True})

        routes = [Route("/healthz", health, methods=["GET"])]
        routes += [Route(p, self.answer, methods=["POST"]) for p in (*EVENT_PATHS, RPC_PATH)]
        return Starlette(routes=routes, exception_handlers={HTTPException: self._http_error})

    async def _http_error(self, _: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return JSONResponse(_error(405, "E_WEBHOOK_METHOD", "use POST")[1], 405)
        where = " or ".join(EVENT_PATHS)
        return JSONResponse(_error(404, "E_WEBHOOK_NOT_FOUND", f"POST to {where}")[1], 404)

    async def answer(self, request: Request) -> Response:
        try:
            status, payload = await self._answer(request)
        except Exception as exc:  # a bug here must not stop the server
            self.ctx.logger.error("webhook_failed", error=repr(exc))
            status, payload = _error(500, "E_WEBHOOK_INTERNAL", "internal error")
        return JSONResponse(payload, status)

    async def _answer(self, request: Request) -> tuple[int, dict[str, Any]]:
        rpc = request.url.path == RPC_PATH
        try:
            if rpc and self.settings.signing_secret is None:
                raise HttpError(403, ErrorCode.E_CONNECTOR_UNSIGNED.value, UNSIGNED_RPC)
            body = await request.body()
            self._check(request.headers, body)
            if rpc:
                event, properties, text = RPC_EVENT, {"rpc": parse_rpc(body)}, ""
            else:
                event, properties, text = parse_body(body, self.settings.default_event)
        except HttpError as exc:
            self.ctx.logger.info("webhook_refused", status=exc.status, code=exc.code)
            return _error(exc.status, exc.code, exc.message)
        key = request.headers.get("idempotency-key") if not rpc else None
        return await self._emit(event, properties, text, key[:200] if key else None)

    def _check(self, headers: Any, body: bytes) -> None:
        """Browser protections, then (with a secret) a fresh signature never used before."""
        guard.check_browser(headers, self.settings.browser)
        guard.check_json(headers)
        secret = self.settings.signing_secret
        if secret is not None:
            now = time.time()
            signature, stamp = guard.check_signature(
                secret, headers, body, self.settings.signature_max_age, now
            )
            self.replays.remember(signature, stamp, now)

    async def _emit(
        self, event: str, properties: dict[str, Any], text: str, idempotency_key: str | None
    ) -> tuple[int, dict[str, Any]]:
        try:
            async with asyncio.timeout(self.settings.timeout):
                reply = await self.ctx.emit(event, properties, text, reply=True,
                                            idempotency_key=idempotency_key)  # fmt: skip
        except TimeoutError:
            return _error(504, "E_AGENT_TIMEOUT", f"no reply within {self.settings.timeout} s")
        assert reply is not None  # emit(reply=True) always answers
        if reply.error_code is not None:
            status = _STATUS_OF.get(reply.error_code, 502)
            status, payload = _error(status, reply.error_code, reply.error_message or "")
            payload.update(reply=reply.text, eventId=reply.event_id)
            return status, payload
        if reply.accepted:
            return 202, {"accepted": True, "eventId": reply.event_id}
        rpc = getattr(reply, "deferred", None)
        if rpc is not None:  # the turn waits for the client to run a tool
            return 200, {"rpc": rpc, "eventId": reply.event_id}
        return 200, {"reply": reply.text, "eventId": reply.event_id}


def _refuse_unsigned_beyond_loopback(host: str) -> None:
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise RuntimeError(
            f"the webhook listens on {host}, beyond this machine, without a signingSecret: "
            "set the Connection secret signingSecret (or config.allowUnsigned: true)"
        )


async def start(ctx: ConnectorContext) -> None:
    """Bind before `ready`: a port in use is a start error naming it."""
    settings = Settings.of(ctx)
    if settings.signing_secret is None and not settings.allow_unsigned:
        _refuse_unsigned_beyond_loopback(settings.host)
    server = WebhookServer(ctx, settings, time.time())
    listener = http.HttpServer(settings.limits)
    await listener.bind(settings.host, settings.port)
    listener.mount(server.app())
    ctx.state["http"] = listener
    host, port = listener.address
    signed = settings.signing_secret is not None
    ctx.logger.info("webhook_listening", addresses=[f"{host}:{port}"], signed=signed,
                    rpc="signed" if signed else "refused")  # fmt: skip


async def run(ctx: ConnectorContext) -> None:
    await ctx.state["http"].serve()
