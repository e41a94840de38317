"""The `api` connector: a swarm behind the standard edges, on one HTTP server per Connection.

    GET  /v1/models, POST /v1/chat/completions      OpenAI-compatible (`_openai.py`)
    GET  /a2a/<agent>/.well-known/agent-card.json  A2A v1.0 agent card (`_a2a.py`)
    POST /a2a/<agent>                              A2A JSON-RPC: SendMessage (message/send),
                                                   SendStreamingMessage (message/stream),
                                                   GetTask (tasks/get), CancelTask (tasks/cancel)
    POST|GET|DELETE /mcp                           MCP server, Streamable HTTP (`_mcp.py`)
    GET  /healthz                                  200 {"ok": true}, without a token (GET and
                                                   HEAD only: no body is read without one)

Every other request needs `Authorization: Bearer <one of config.tokens>` (401 otherwise);
a Connection without tokens does not start. Like the webhook, it refuses what only a browser
sends (`_httpguard.py`: an `Origin` not in `allowedOrigins` is 403, a `Host` that is not an IP,
`localhost` or in `allowedHosts` is 421, a POST body that is not JSON is 415), and the limits
of `_http.py` apply (body and header sizes, read and write deadlines, connections). All of
that is decided on the request's head (`Gate`), before its body is read: a refused request
costs no memory for its body. A client address over `requestsPerMinutePerClient`, or a token
over `requestsPerMinute`, gets 429 with `Retry-After` (`_ratelimit.py`); past
`maxConcurrentRequests` requests in progress (only authorized ones count), 503.

Each request is one event to one agent instance, addressed by the connector
(`ctx.emit(agent=, instance_key=)`), in the Connection's own namespace: the instance a client
names (OpenAI `user`, A2A context, MCP `instanceKey`, `X-Goondan-Instance`) is
`api:<Connection>:<token id>:<name>` (`_edge.Edge.key`; the token id is the first 12 hex
digits of the token's SHA-256, `token_id`; without the token id when

`sharedInstances` is "true"), so a client reaches neither another token's instances nor one
the CLI or another connector made. An `Idempotency-Key` is the token's own. The daemon
journals the event before it is accepted, and the HTTP answer waits for the agent's reply, at
most `timeoutMs` (10 minutes, then 504).

Config: `host` (127.0.0.1), `port` (8790), `tokens` (required: strings or ValueSources),
`agents` (the agents served, default every agent of the swarm), `timeoutMs` (600000),
`publicUrl` (the URL clients use, for A2A cards; default http://host:port), `allowedOrigins`,
`allowedHosts`, `maxBodyBytes` (1 MiB), `maxHeaderBytes`, `readTimeoutMs`, `writeTimeoutMs`,
`maxConnections` (1000), `maxConnectionsPerClient` (100), `maxConcurrentRequests` (1000),
`requestsPerMinute` (600 a token), `requestsPerMinutePerClient` (1200 an address),
`sharedInstances` ("false").

"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bundles.sdk import ConnectorContext, load_sibling

guard = load_sibling(__file__, "_httpguard")
http = load_sibling(__file__, "_http")
edge = load_sibling(__file__, "_edge")
openai = load_sibling(__file__, "_openai")
a2a = load_sibling(__file__, "_a2a")
mcp = load_sibling(__file__, "_mcp")
ratelimit = load_sibling(__file__, "_ratelimit")
OPEN_PATHS = frozenset({"/healthz"})
READS = frozenset({"GET", "HEAD"})
"""The methods open on OPEN_PATHS: any other would have its body read without a token."""

CLIENT_HEADER = edge.CLIENT_HEADER.encode()


def _list(value: Any) -> list[str]:
    items = value if isinstance(value, list) else str(value or "").split(",")
    return [str(item).strip() for item in items if str(item).strip()]


class Limited(Exception):
    """A client over its rate: 429 with `Retry-After` (shaped like `_httpguard.HttpError`)."""

    status = 429
    code = "E_API_RATE_LIMITED"

    def __init__(self, retry_after: int, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def token_id(token: bytes) -> str:
    """A token's name in instance keys and logs: not the token, and stable across restarts
    and reorderings of `tokens` (an index would hand one client's instances to another)."""
    return hashlib.sha256(token).hexdigest()[:12]


class Gate:
    """ASGI middleware on the request head, before the body is read (`_http.HttpServer.mount`):
    the browser protections, the client address's rate, the bearer token, the token's rate,
    then the number of requests in progress (only requests that passed count, so sockets
    without a token cannot take them). The app learns the token from `edge.CLIENT_HEADER`,
    set here only (a client's own is dropped)."""

    def __init__(self, app: ASGIApp, tokens: list[bytes], browser: Any, limits: Any) -> None:
        self.app = app
        self.tokens = [(token, token_id(token)) for token in tokens]
        self.browser = browser
        self.per_token = ratelimit.Rates(limits.per_token)
        self.per_address = ratelimit.Rates(limits.per_address)
        self.max_requests: int = limits.max_requests
        self.requests = 0
        """Requests in progress."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["path"] in OPEN_PATHS and scope["method"] in READS):
            await self.app(scope, receive, send)
            return
        try:
            client = self._admit(scope)
        except (guard.HttpError, Limited) as exc:
            await _refuse(exc)(scope, receive, send)

            return
        headers = [(k, v) for k, v in scope["headers"] if k != CLIENT_HEADER]
        self.requests += 1
        try:
            await self.app({**scope, "headers": [*headers, (CLIENT_HEADER, client.encode())]},
                           receive, send)  # fmt: skip
        finally:
            self.requests -= 1

    def _admit(self, scope: Scope) -> str:
        """The id of the request's token; HttpError when it may not go on."""
        headers = Headers(scope=scope)
        guard.check_browser(headers, self.browser)
        address = scope.get("client") or ("", 0)
        _within(self.per_address.wait(str(address[0])), "requestsPerMinutePerClient", "address")
        if scope["method"] == "POST":
            guard.check_json(headers)
        client = self._check_token(headers.get("authorization", ""))
        _within(self.per_token.wait(client), "requestsPerMinute", "token")
        if self.requests >= self.max_requests:
            raise guard.HttpError(503, "E_API_BUSY", f"{self.requests} requests are in progress, "
                                  "the most this server takes (maxConcurrentRequests); "
                                  "try again shortly")  # fmt: skip
        return client

    def _check_token(self, authorization: str) -> str:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise guard.HttpError(401, "E_API_UNAUTHORIZED", "send Authorization: Bearer <token>")
        presented = given.strip().encode()
        # every token is compared (constant time each), so timing does not tell which failed
        matches = [name for token, name in self.tokens if hmac.compare_digest(presented, token)]
        if not matches:
            raise guard.HttpError(401, "E_API_UNAUTHORIZED", "the bearer token is not valid")
        return matches[0]


def _within(wait: int, setting: str, whose: str) -> None:
    if wait > 0:
        raise Limited(wait, f"this {whose} sent more requests than config.{setting} allows; "
                      f"send again in {wait} s")  # fmt: skip


def _refuse(exc: Any) -> Response:
    """The answer to a request refused on its head: its body is not read, and its connection
    closes after the answer (`_http` discards what the client still sends)."""
    extra = {"connection": "close"}
    if exc.status == 401:
        extra["www-authenticate"] = "Bearer"
    if isinstance(exc, Limited):
        extra["retry-after"] = str(exc.retry_after)
    return JSONResponse(openai.error_body(exc.status, exc.code, exc.message), exc.status,
                        headers=extra)  # fmt: skip


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    per_token: float
    per_address: float
    max_requests: int

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> EdgeLimits:
        return cls(
            per_token=float(config.get("requestsPerMinute", 600)),
            per_address=float(config.get("requestsPerMinutePerClient", 1200)),
            max_requests=int(config.get("maxConcurrentRequests", 1000)),
        )


class Api:
    def __init__(self, ctx: ConnectorContext) -> None:
        cfg = ctx.config
        tokens = _list(cfg.get("tokens"))
        if not tokens:
            raise RuntimeError(
                "the api connector needs bearer tokens: set the Connection's config.tokens, "
                "e.g. [{valueFrom: {env: GOONDAN_API_TOKEN}}]"
            )
        swarm_agents = [a.name for a in ctx.swarm.agents]
        served = _list(cfg.get("agents")) or swarm_agents
        unknown = sorted(set(served) - set(swarm_agents))
        if unknown:
            raise RuntimeError(f"config.agents names {unknown}, not agents of swarm "
                               f"{ctx.swarm.name!r} ({', '.join(swarm_agents)})")  # fmt: skip
        self.ctx = ctx
        self.host = str(cfg.get("host", "127.0.0.1"))
        self.port = int(cfg.get("port", 8790))
        self.tokens = [t.encode() for t in tokens]
        self.browser = guard.BrowserPolicy.of(cfg)
        self.limits = http.Limits.of(cfg, "E_API")
        self.edge_limits = EdgeLimits.of(cfg)
        self.edge = edge.Edge(ctx, int(cfg.get("timeoutMs", 600_000)) / 1000, frozenset(served),
                              shared=guard.flag(cfg, "sharedInstances"))  # fmt: skip
        self.mcp = mcp.McpEdge(self.edge)

    def app(self, public_url: str) -> ASGIApp:
        async def health(_: Request) -> Response:
            return JSONResponse({"ok": True})

        routes: list[Any] = [Route("/healthz", health, methods=["GET"])]
        routes += openai.Completions(self.edge).routes()
        routes += a2a.routes(self.edge, public_url)
        routes += self.mcp.routes()
        return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})

    def gate(self, app: ASGIApp) -> ASGIApp:
        return Gate(app, self.tokens, self.browser, self.edge_limits)


async def _not_found(request: Request, _: Exception) -> Response:
    where = "/v1/chat/completions, /v1/models, /a2a/<agent>, /mcp"
    return JSONResponse(openai.error_body(404, "E_API_NOT_FOUND", f"no {request.url.path} "
                                          f"here; use {where}"), 404)  # fmt: skip


async def _not_allowed(request: Request, _: Exception) -> Response:
    message = f"{request.method} is not allowed on {request.url.path}"
    return JSONResponse(openai.error_body(405, "E_API_METHOD", message), 405)


def public_url(config: Mapping[str, Any], host: str, port: int) -> str:
    url = str(config.get("publicUrl") or "").rstrip("/")
    if url:
        return url
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def start(ctx: ConnectorContext) -> None:
    """Bind before `ready`: a port in use, or no tokens, is a start error naming it."""
    api = Api(ctx)
    server = http.HttpServer(api.limits, openai.error_body)
    await server.bind(api.host, api.port)
    host, port = server.address
    server.mount(api.app(public_url(ctx.config, host, port)), head=api.gate)
    ctx.state["api"], ctx.state["http"] = api, server
    ctx.logger.info("api_listening", addresses=[f"{host}:{port}"], agents=sorted(api.edge.agents))


async def run(ctx: ConnectorContext) -> None:
    api = ctx.state["api"]
    async with api.mcp.running():  # the MCP sessions' task group lives in this task
        await ctx.state["http"].serve()
