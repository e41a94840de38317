"""Who may use Studio: an ASGI middleware in front of every route.

- **Host**: an IP address, `localhost`, or a name in `allowed_hosts` (a DNS-rebinding page
  reaches 127.0.0.1 under its own name and is refused).
- **Token** (always, unless Studio was started with --no-token on loopback: loopback is
  shared by every user of the machine): the `goondan_studio` cookie, an `Authorization:
  Bearer` header, or `?token=` once (which sets the cookie, HttpOnly and SameSite=Strict, and
  redirects to the same page without it).
- **Actions** (any method but GET/HEAD): refused unless Studio runs with --allow-actions;
  then they must come from Studio's own pages (an `Origin` equal to the page's, CSRF) with a
  JSON body (a cross-site form cannot send one without a preflight).
Refusals are `{"error": {code, message}}` with 403 (`E_STUDIO_FORBIDDEN`, `E_STUDIO_READ_ONLY`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from protocol.errors import ErrorCode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
COOKIE = "goondan_studio"


@dataclass(frozen=True, slots=True)
class Policy:
    token: str | None
    """None: no token needed (--no-token, a loopback Studio only)."""
    allow_actions: bool
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)


def _host_ok(host: str, allowed: frozenset[str]) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]").lower()
    if name in ("localhost", *allowed):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    def __init__(self, app: App, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not _host_ok(host, self.policy.allowed_hosts):
            await _refuse(
                send,
                ErrorCode.E_STUDIO_FORBIDDEN,
                f"Host {host!r} is not this Studio's (a DNS-rebinding page?)",
            )
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        token = self.policy.token
        if token is not None and "token" in query and _same(query["token"], token):
            await _set_cookie_and_redirect(send, scope, query, token)
            return
        if token is not None and not self._authorized(headers, token):
            await _refuse(
                send,
                ErrorCode.E_STUDIO_FORBIDDEN,
                "this Studio needs its token: open the URL it printed at start "
                "(?token=...) or send Authorization: Bearer <token>",
            )
            return
        if scope["method"] not in ("GET", "HEAD"):
            problem = self._action_problem(headers, host)
            if problem is not None:
                await _refuse(send, *problem)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _authorized(headers: dict[str, str], token: str) -> bool:
        bearer = headers.get("authorization", "")
        if bearer.startswith("Bearer ") and _same(bearer[7:], token):
            return True
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no token
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and _same(morsel.value, token)

    def _action_problem(self, headers: dict[str, str], host: str) -> tuple[ErrorCode, str] | None:
        if not self.policy.allow_actions:
            return (
                ErrorCode.E_STUDIO_READ_ONLY,
                "this Studio is read-only: start it with --allow-actions to act",
            )
        origin = headers.get("origin")
        if origin not in (f"http://{host}", f"https://{host}"):
            return (
                ErrorCode.E_STUDIO_FORBIDDEN,
                f"an action must come from Studio's own page (Origin {origin!r})",
            )
        if headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return ErrorCode.E_STUDIO_FORBIDDEN, "an action's body must be application/json"
        return None


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


async def _refuse(send: Send, code: ErrorCode, message: str) -> None:
    body = json.dumps({"error": {"code": code.value, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _set_cookie_and_redirect(
    send: Send, scope: Scope, query: dict[str, str], token: str
) -> None:
    rest = urlencode({k: v for k, v in query.items() if k != "token"})
    location = scope.get("path", "/") + (f"?{rest}" if rest else "")
    cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode()),
                (b"set-cookie", cookie.encode()),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
