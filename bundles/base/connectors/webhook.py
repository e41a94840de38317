"""The `webhook` connector: HTTP POST in, the agent's reply out (stdlib asyncio, no framework).

    POST /events (or /)   {"event"?, "text" | "input", "properties"?, "instanceKey"?}
    POST /rpc             a client's JSON-RPC 2.0 response {jsonrpc, id, result | error}
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
One request per connection (`Connection: close`): simple, and enough for webhooks.

Deferred (client-side) tools, ARCHITECTURE.md §10: when the turn suspends on a tool that must run on
the client, the answer is 200 {"rpc": {jsonrpc, id, method, params}, "eventId"}; the client runs it
and POSTs its JSON-RPC response to `/rpc` (signed like any POST); that request's answer is the
resumed turn's reply, 200 {"reply", "eventId"} (or 202 when nobody waits for the turn).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bundles.sdk import ConnectorContext, load_sibling
from protocol.private import private_dir

guard = load_sibling(__file__, "_httpguard")
HttpError = guard.HttpError
HEADER_LIMIT = 16 * 1024
STATUS_TEXT = {
    200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
    421: "Misdirected Request", 422: "Unprocessable Entity", 429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway", 504: "Gateway Timeout",
}  # fmt: skip
EVENT_PATHS = ("/", "/events")
_STATUS_OF = {"E_CONNECTOR_NO_ROUTE": 422, "E_AGENT_CAPACITY": 429, "E_CALL_NOT_FOUND": 404}
"""HTTP status of a coded error the daemon answered with (anything else: 502)."""
RPC_PATH = "/rpc"
RPC_EVENT = "deferred.answer"


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8787
    max_body_bytes: int = 1024 * 1024
    timeout: float = 60.0
    read_timeout: float = 10.0
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
            max_body_bytes=int(cfg.get("maxBodyBytes", 1024 * 1024)),
            timeout=int(cfg.get("timeoutMs", 60_000)) / 1000,
            read_timeout=int(cfg.get("readTimeoutMs", 10_000)) / 1000,
            default_event=str(cfg.get("defaultEvent", "message")),
            signing_secret=secret.encode() if secret else None,
            signature_max_age=float(cfg.get("signatureMaxAgeSeconds", guard.DEFAULT_MAX_AGE)),
            browser=guard.BrowserPolicy.of(cfg),
            allow_unsigned=bool(cfg.get("allowUnsigned", False)),
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


async def write_json(writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
    """Send one JSON response and close the connection (one request per connection)."""
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Status')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    try:
        writer.write(head.encode() + body)
        await writer.drain()
    except ConnectionError:
        pass  # the client went away: nothing left to tell it
    finally:
        writer.close()


Answer = Callable[[asyncio.StreamReader], Awaitable[tuple[int, Any]]]


async def respond(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    answer: Answer,
    logger: Any,
    failed_event: str,
    internal: tuple[int, Any],
) -> None:
    """One HTTP exchange: write `answer`'s (status, JSON payload). A peer gone mid-request is
    closed quietly; a bug in `answer` is logged as `failed_event` and answered `internal`,
    and the server goes on."""
    try:
        status, payload = await answer(reader)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
        return
    except Exception as exc:  # a bug here must not stop the server
        logger.error(failed_event, error=repr(exc))
        status, payload = internal
    await write_json(writer, status, payload)


async def read_request(reader: asyncio.StreamReader, max_body: int) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(400, "E_WEBHOOK_BAD_REQUEST", "request headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise HttpError(400, "E_WEBHOOK_BAD_REQUEST", "malformed request line")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    method, path = parts[0], parts[1].split("?", 1)[0]
    if method != "POST":
        return Request(method, path, headers)
    if "content-length" not in headers:
        raise HttpError(411, "E_WEBHOOK_BAD_REQUEST", "Content-Length is required")
    try:
        length = int(headers["content-length"])
    except ValueError:
        raise HttpError(400, "E_WEBHOOK_BAD_REQUEST", "bad Content-Length") from None
    if length < 0 or length > max_body:
        raise HttpError(413, "E_WEBHOOK_TOO_LARGE", f"the body is limited to {max_body} bytes")
    return Request(method, path, headers, await reader.readexactly(length))


class WebhookServer:
    def __init__(self, ctx: ConnectorContext, settings: Settings, now: float) -> None:
        self.ctx = ctx
        self.settings = settings
        state = ctx.state_dir
        if state is not None:
            private_dir(state)
        path = state / "replay.jsonl" if state is not None else None
        self.replays = guard.ReplayCache(settings.signature_max_age, path, now)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        internal = _error(500, "E_WEBHOOK_INTERNAL", "internal error")
        await respond(reader, writer, self._answer, self.ctx.logger, "webhook_failed", internal)

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
        try:
            request = await self._read(reader)
            if request.method == "GET" and request.path == "/healthz":
                return 200, {"ok": True}
            if request.path not in (*EVENT_PATHS, RPC_PATH):
                raise HttpError(404, "E_WEBHOOK_NOT_FOUND", f"POST to {' or '.join(EVENT_PATHS)}")
            if request.method != "POST":
                raise HttpError(405, "E_WEBHOOK_METHOD", "use POST")
            self._check(request)
            if request.path == RPC_PATH:
                event, properties, text = RPC_EVENT, {"rpc": parse_rpc(request.body)}, ""
            else:
                event, properties, text = parse_body(request.body, self.settings.default_event)
        except HttpError as exc:
            self.ctx.logger.info("webhook_refused", status=exc.status, code=exc.code)
            return _error(exc.status, exc.code, exc.message)
        key = request.headers.get("idempotency-key") if request.path != RPC_PATH else None
        return await self._emit(event, properties, text, key[:200] if key else None)

    def _check(self, request: Request) -> None:
        """Browser protections, then (with a secret) a fresh signature never used before."""
        guard.check_browser(request.headers, self.settings.browser)
        guard.check_json(request.headers)
        secret = self.settings.signing_secret
        if secret is not None:
            now = time.time()
            signature, stamp = guard.check_signature(
                secret, request.headers, request.body, self.settings.signature_max_age, now
            )
            self.replays.remember(signature, stamp, now)

    async def _read(self, reader: asyncio.StreamReader) -> Request:
        """The request, within `readTimeoutMs`: a client that stalls does not hold a slot."""
        try:
            async with asyncio.timeout(self.settings.read_timeout):
                return await read_request(reader, self.settings.max_body_bytes)
        except TimeoutError:
            raise HttpError(408, "E_WEBHOOK_TIMEOUT", "the request was not sent in time") from None

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
    listener = await asyncio.start_server(
        server.handle, settings.host, settings.port, limit=HEADER_LIMIT
    )
    ctx.state["listener"] = listener
    bound = [s.getsockname() for s in listener.sockets]
    ctx.logger.info("webhook_listening", addresses=[f"{a[0]}:{a[1]}" for a in bound],
                    signed=settings.signing_secret is not None)  # fmt: skip


async def run(ctx: ConnectorContext) -> None:
    listener: asyncio.Server = ctx.state["listener"]
    async with listener:
        await listener.serve_forever()
