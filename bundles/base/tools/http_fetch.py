"""`http-fetch`: HTTP GET and POST to public http(s) URLs, SSRF-safe.

Every hop (the first request and each redirect, followed here by hand, at most `maxRedirects`)
is vetted by `_netguard` after DNS resolution, and the connection goes to the vetted address
itself while the Host header and TLS SNI/certificate check keep the original name. Proxy
variables from the environment are ignored. Bodies are read as a stream and cut at `maxBytes`
(after decompression, so a gzip bomb stops early).

A redirect to another origin (scheme, host or port) carries only the headers of
`SAFE_CROSS_ORIGIN_HEADERS`: any other header the caller set (Authorization, Cookie, X-Api-Key,
...) may be a credential meant for the first origin, and a name cannot tell us which are.
A 307/308 to another origin that would re-send a request body is refused
(`E_TOOL_HTTP`): the body was written for the first origin too. Redirects within one origin
keep every header and the body.

Settings (`Tool.spec.config`): `allowHosts` (host names, IPs or CIDRs that skip the address
checks), `maxRedirects` (default 5), `maxTimeoutMs` (default 120000), `maxBytesLimit` (largest
`maxBytes` a call may ask for, default 5000000), `userAgent`, `caFile` (a PEM bundle to trust
instead of the system store, for internal CAs).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from bundles.sdk import JsonObject, ToolContext, ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _netguard
else:
    _netguard = load_sibling(__file__, "_netguard")

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_BYTES = 500_000
_REDIRECTS = {301, 302, 303, 307, 308}
SAFE_CROSS_ORIGIN_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "content-language",
        "pragma",
        "user-agent",
    }
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_TEXT_TYPES = ("text/", "json", "xml", "javascript", "x-www-form-urlencoded", "yaml")


def _setting(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolFailed(f"Tool config {key!r} must be a non-negative integer, got {value!r}")
    return value


def _verify(config: Mapping[str, Any]) -> ssl.SSLContext | bool:
    ca_file = config.get("caFile")
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as error:
        raise ToolFailed(f"Tool config 'caFile' cannot be loaded: {error}") from None


def _parse_url(raw: str) -> httpx.URL:
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL as error:
        raise ToolFailed(
            f"invalid URL {raw!r}: {error}", code=ErrorCode.E_TOOL_URL_INVALID
        ) from None
    if url.scheme not in _netguard.ALLOWED_SCHEMES or not url.host:
        raise ToolFailed(
            f"URL {raw!r} is not an http(s) URL with a host",
            code=ErrorCode.E_TOOL_URL_INVALID,
            suggestion="Use an absolute http:// or https:// URL.",
        )
    return url


def _host_header(url: httpx.URL) -> str:
    return url.netloc.decode("ascii")


async def _send(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    headers: dict[str, str],
    content: bytes | None,
    allow: _netguard.AllowList,
) -> httpx.Response:
    """One hop: vet the host, then connect to the vetted IP with the original Host and SNI."""
    host = url.raw_host.decode("ascii")
    ip = await _netguard.vet(host, url.port or (443 if url.scheme == "https" else 80), allow)
    request = client.build_request(
        method,
        url.copy_with(host=str(ip)),
        headers={**headers, "Host": _host_header(url)},
        content=content,
        extensions={"sni_hostname": host} if url.scheme == "https" else {},
    )
    return await client.send(request, stream=True)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme)


def _next_hop(
    response: httpx.Response, url: httpx.URL, method: str, headers: dict[str, str], body: Any
) -> tuple[httpx.URL, str, dict[str, str], Any]:
    """Where a redirect leads, with the method, headers and body the next request keeps."""
    target = _parse_url(str(url.join(response.headers["location"])))
    if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
        method, body = "GET", None
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if _origin(target) != _origin(url):
        if body:
            raise ToolFailed(
                f"{response.status_code} redirect from {url} to another origin ({target}) would "
                "re-send the request body there",
                code=ErrorCode.E_TOOL_HTTP,
                suggestion="If you trust that origin, send the request to it directly.",
            )
        headers = {k: v for k, v in headers.items() if k.lower() in SAFE_CROSS_ORIGIN_HEADERS}
    return target, method, headers, body


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data.extend(chunk)
        if len(data) > max_bytes:
            return bytes(data[:max_bytes]), True
    return bytes(data), False


def _body_fields(response: httpx.Response, data: bytes) -> JsonObject:
    content_type = response.headers.get("content-type", "").lower()
    if any(kind in content_type for kind in _TEXT_TYPES):
        return {"body": data.decode(response.charset_encoding or "utf-8", errors="replace")}
    try:
        return {"body": data.decode("utf-8"), "bodyEncoding": "text"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(data).decode("ascii"), "bodyEncoding": "base64"}


def _request_parts(ctx: ToolContext, input: JsonObject) -> tuple[dict[str, str], bytes | None]:
    headers = {k: str(v) for k, v in (input.get("headers") or {}).items() if k.lower() != "host"}
    if isinstance(ctx.config.get("userAgent"), str):
        headers.setdefault("User-Agent", ctx.config["userAgent"])
    body = input.get("body")
    if body is None:
        return headers, None
    if isinstance(body, str):
        return headers, body.encode("utf-8")
    if not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    return headers, json.dumps(body).encode("utf-8")


async def _fetch(ctx: ToolContext, method: str, input: JsonObject) -> JsonObject:
    url = _parse_url(str(input["url"]))
    config = ctx.config
    allow = _netguard.AllowList.parse(config.get("allowHosts") or [])
    max_bytes = min(
        int(input.get("maxBytes", DEFAULT_MAX_BYTES)), _setting(config, "maxBytesLimit", 5_000_000)
    )
    max_redirects = _setting(config, "maxRedirects", 5)
    headers, content = _request_parts(ctx, input)
    redirects: list[str] = []
    started = time.monotonic()
    async with httpx.AsyncClient(
        trust_env=False, follow_redirects=False, verify=_verify(config)
    ) as client:
        while True:
            response = await _send(client, method, url, headers, content, allow)
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    if len(redirects) == max_redirects:
                        raise ToolFailed(
                            f"more than {max_redirects} redirects (last: {url})",
                            code=ErrorCode.E_TOOL_HTTP,
                        )
                    url, method, headers, content = _next_hop(
                        response, url, method, headers, content
                    )
                    redirects.append(str(url))
                    continue
                data, truncated = await _read_capped(response, max_bytes)
            finally:
                await response.aclose()
            return {
                "url": str(url),
                "status": response.status_code,
                "statusText": response.reason_phrase,
                "headers": dict(response.headers),
                **_body_fields(response, data),
                "truncated": truncated,
                "redirects": redirects,
                "durationMs": round((time.monotonic() - started) * 1000),
            }


async def _guarded(ctx: ToolContext, method: str, input: JsonObject) -> JsonObject:
    timeout_ms = min(
        int(input.get("timeoutMs", DEFAULT_TIMEOUT_MS)),
        _setting(ctx.config, "maxTimeoutMs", 120_000),
    )
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            return await _fetch(ctx, method, input)
    except (TimeoutError, httpx.TimeoutException):
        raise ToolFailed(
            f"{method} {input['url']} took longer than {timeout_ms} ms",
            code=ErrorCode.E_TOOL_TIMEOUT,
            suggestion="Retry later or pass a larger timeoutMs.",
        ) from None
    except httpx.HTTPError as error:
        raise _failure(f"{method} {input['url']}", error) from None


def _failure(request: str, error: httpx.HTTPError) -> ToolFailed:
    """E_TOOL_HTTP; a refused TLS certificate is named as such, with what to change."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return ToolFailed(
            f"{request} failed: the server's TLS certificate was not accepted ({cause})",
            code=ErrorCode.E_TOOL_HTTP,
            suggestion="The certificate must name the URL's host and chain to a trusted CA; "
            "for an internal CA, set the Tool config caFile to its PEM file.",
        )
    return ToolFailed(
        f"{request} failed: {type(error).__name__}: {error}", code=ErrorCode.E_TOOL_HTTP
    )


async def get(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """GET `url`; the body is text (or base64 for binary), cut at `maxBytes`."""
    return await _guarded(ctx, "GET", {k: v for k, v in input.items() if k != "body"})


async def post(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """POST `body` (a string as is, anything else as JSON) to `url`."""
    return await _guarded(ctx, "POST", input)


handlers = {"get": get, "post": post}
