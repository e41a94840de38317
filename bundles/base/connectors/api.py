"""The `api` connector: a swarm behind the standard edges, on one HTTP server per Connection.

    GET  /v1/models, POST /v1/chat/completions      OpenAI-compatible (`_openai.py`)
    GET  /a2a/<agent>/.well-known/agent-card.json  A2A v1.0 agent card (`_a2a.py`)
    POST /a2a/<agent>                              A2A JSON-RPC: SendMessage (message/send),
                                                   SendStreamingMessage (message/stream),
                                                   GetTask (tasks/get), CancelTask (tasks/cancel)
    POST|GET|DELETE /mcp                           MCP server, Streamable HTTP (`_mcp.py`)
    GET  /healthz                                  200 {"ok": true}, without a token

Every other request needs `Authorization: Bearer <one of config.tokens>` (401 otherwise);
a Connection without tokens does not start. Like the webhook, it refuses what only a browser
sends (`_httpguard.py`: an `Origin` not in `allowedOrigins` is 403, a `Host` that is not an IP,
`localhost` or in `allowedHosts` is 421, a POST body that is not JSON is 415), and the limits
of `_http.py` apply (body and header sizes, read and write deadlines). Each request is one
event to one agent instance, addressed by the connector (`ctx.emit(agent=, instance_key=)`);
the daemon journals it before it is accepted, and the HTTP answer waits for the agent's
reply, at most `timeoutMs` (10 minutes, then 504).

Config: `host` (127.0.0.1), `port` (8790), `tokens` (required: strings or ValueSources),
`agents` (the agents served, default every agent of the swarm), `timeoutMs` (600000),
`publicUrl` (the URL clients use, for A2A cards; default http://host:port), `allowedOrigins`,
`allowedHosts`, `maxBodyBytes` (1 MiB), `maxHeaderBytes`, `readTimeoutMs`, `writeTimeoutMs`,
`maxConnections`.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
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
OPEN_PATHS = frozenset({"/healthz"})


def _list(value: Any) -> list[str]:
    items = value if isinstance(value, list) else str(value or "").split(",")
    return [str(item).strip() for item in items if str(item).strip()]


class Gate:
    """ASGI middleware: the browser protections, then the bearer token."""

    def __init__(self, app: ASGIApp, tokens: list[bytes], browser: Any) -> None:
        self.app = app
        self.tokens = tokens
        self.browser = browser

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            guard.check_browser(headers, self.browser)
            if scope["method"] == "POST":
                guard.check_json(headers)
            self._check_token(headers.get("authorization", ""))
        except guard.HttpError as exc:
            extra = {"www-authenticate": "Bearer"} if exc.status == 401 else None
            body = openai.error_body(exc.status, exc.code, exc.message)
            await JSONResponse(body, exc.status, headers=extra)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check_token(self, authorization: str) -> None:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise guard.HttpError(401, "E_API_UNAUTHORIZED", "send Authorization: Bearer <token>")
        presented = given.strip().encode()
        # every token is compared (constant time each), so timing does not tell which failed
        matches = [hmac.compare_digest(presented, token) for token in self.tokens]
        if not any(matches):
            raise guard.HttpError(401, "E_API_UNAUTHORIZED", "the bearer token is not valid")


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
        self.edge = edge.Edge(ctx, int(cfg.get("timeoutMs", 600_000)) / 1000, frozenset(served))
        self.mcp = mcp.McpEdge(self.edge)

    def app(self, public_url: str) -> ASGIApp:
        async def health(_: Request) -> Response:
            return JSONResponse({"ok": True})

        routes: list[Any] = [Route("/healthz", health, methods=["GET"])]
        routes += openai.Completions(self.edge).routes()
        routes += a2a.routes(self.edge, public_url)
        routes += self.mcp.routes()
        app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})
        return Gate(app, self.tokens, self.browser)


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
    server.mount(api.app(public_url(ctx.config, host, port)))
    ctx.state["api"], ctx.state["http"] = api, server
    ctx.logger.info("api_listening", addresses=[f"{host}:{port}"], agents=sorted(api.edge.agents))


async def run(ctx: ConnectorContext) -> None:
    api = ctx.state["api"]
    async with api.mcp.running():  # the MCP sessions' task group lives in this task
        await ctx.state["http"].serve()
