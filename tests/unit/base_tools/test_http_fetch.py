"""http-fetch against a local HTTP server on 127.0.0.1, opened only through `allowHosts`.

Every SSRF target below is refused before any connection is attempted (literal addresses are
checked without DNS), so these tests send traffic to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from bundles.sdk import ToolFailed

from .conftest import FakeContext, call, load_tool

http = load_tool("tools/http_fetch.py")


@dataclass
class Seen:
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


class Handler(BaseHTTPRequestHandler):
    seen: Seen

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {"Content-Type": "text/plain"}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, body: bytes) -> None:
        url = urlparse(self.path)
        self.seen.requests.append((self.command, self.path, dict(self.headers), body))
        query = parse_qs(url.query)
        if url.path == "/hello":
            self._reply(
                200, b"hello", {"Content-Type": "text/plain", "X-Host": self.headers["Host"]}
            )
        elif url.path == "/echo":
            payload = {"method": self.command, "body": body.decode(), "headers": dict(self.headers)}
            self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})
        elif url.path == "/redirect":
            status = int(query.get("status", ["302"])[0])
            self._reply(status, b"", {"Location": query["to"][0]})
        elif url.path == "/loop":
            self._reply(302, b"", {"Location": "/loop"})
        elif url.path == "/big":
            self._reply(200, b"a" * 2_000_000)
        elif url.path == "/binary":
            self._reply(200, bytes(range(256)), {"Content-Type": "application/octet-stream"})
        elif url.path == "/slow":
            self.seen.release.wait(10)
            self._reply(200, b"late")
        else:
            self._reply(404, b"no such path")

    def do_GET(self) -> None:
        self._route(b"")

    def do_POST(self) -> None:
        self._route(self.rfile.read(int(self.headers.get("Content-Length", 0))))


@dataclass
class Server:
    port: int
    seen: Seen

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


def _serve() -> Iterator[Server]:
    seen = Seen()
    handler = type("BoundHandler", (Handler,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield Server(httpd.server_address[1], seen)
    finally:
        seen.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serve()


@pytest.fixture
def other() -> Iterator[Server]:
    """A second server: another port is another origin."""
    yield from _serve()


@pytest.fixture
def local(ctx: FakeContext) -> FakeContext:
    return replace(ctx, config={"allowHosts": ["127.0.0.1"]})


async def fetch(ctx: FakeContext, export: str, args: dict[str, Any]) -> Any:
    async with asyncio.timeout(15):
        return await call(http, export, ctx, args)


async def refused(ctx: FakeContext, export: str, args: dict[str, Any]) -> ToolFailed:
    with pytest.raises(ToolFailed) as info:
        await fetch(ctx, export, args)
    return info.value


async def test_get_returns_status_headers_and_body(local: FakeContext, server: Server) -> None:
    out = await fetch(local, "get", {"url": server.url("/hello")})
    assert out["status"] == 200
    assert out["body"] == "hello"
    assert out["truncated"] is False
    assert out["redirects"] == []
    assert out["url"] == server.url("/hello")
    assert out["headers"]["x-host"] == f"127.0.0.1:{server.port}"


async def test_a_name_connects_to_its_vetted_address_and_keeps_the_host_header(
    ctx: FakeContext, server: Server
) -> None:
    named = replace(ctx, config={"allowHosts": ["localhost"]})
    out = await fetch(named, "get", {"url": server.url("/hello", host="localhost")})
    assert out["headers"]["x-host"] == f"localhost:{server.port}"


async def test_post_sends_strings_as_is_and_values_as_json(
    local: FakeContext, server: Server
) -> None:
    out = await fetch(local, "post", {"url": server.url("/echo"), "body": "raw text"})
    assert json.loads(out["body"])["body"] == "raw text"
    out = await fetch(
        local, "post", {"url": server.url("/echo"), "body": {"a": [1, 2]}, "headers": {"X-T": "1"}}
    )
    echoed = json.loads(out["body"])
    assert (echoed["method"], json.loads(echoed["body"])) == ("POST", {"a": [1, 2]})
    assert echoed["headers"]["Content-Type"] == "application/json"
    assert echoed["headers"]["X-T"] == "1"


async def test_body_over_max_bytes_is_truncated(local: FakeContext, server: Server) -> None:
    out = await fetch(local, "get", {"url": server.url("/big"), "maxBytes": 1000})
    assert out["truncated"] is True
    assert out["body"] == "a" * 1000


async def test_binary_bodies_come_back_as_base64(local: FakeContext, server: Server) -> None:
    out = await fetch(local, "get", {"url": server.url("/binary")})
    assert out["bodyEncoding"] == "base64"
    assert base64.b64decode(out["body"]) == bytes(range(256))


async def test_redirects_are_followed_and_reported(local: FakeContext, server: Server) -> None:
    out = await fetch(local, "get", {"url": server.url("/redirect?to=/hello")})
    assert (out["status"], out["body"]) == (200, "hello")
    assert out["redirects"] == [server.url("/hello")]


async def test_a_303_after_post_becomes_a_get_without_body(
    local: FakeContext, server: Server
) -> None:
    out = await fetch(
        local, "post", {"url": server.url("/redirect?status=303&to=/echo"), "body": "x"}
    )
    assert json.loads(out["body"])["method"] == "GET"


async def test_too_many_redirects(local: FakeContext, server: Server) -> None:
    error = await refused(local, "get", {"url": server.url("/loop")})
    assert error.code == "E_TOOL_HTTP"
    assert "more than 5 redirects" in error.message


async def test_a_slow_server_times_out(local: FakeContext, server: Server) -> None:
    error = await refused(local, "get", {"url": server.url("/slow"), "timeoutMs": 200})
    assert error.code == "E_TOOL_TIMEOUT"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/hello",
        "http://localhost:{port}/hello",
        "http://[::1]:{port}/hello",
        "http://[::ffff:127.0.0.1]:{port}/hello",
        "http://0.0.0.0:{port}/hello",
        "http://2130706433:{port}/hello",
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://10.0.0.1/",
        "http://192.168.0.1/",
    ],
)
async def test_ssrf_targets_are_refused(ctx: FakeContext, server: Server, url: str) -> None:
    error = await refused(ctx, "get", {"url": url.format(port=server.port)})
    assert error.code == "E_TOOL_SSRF_BLOCKED"
    assert server.seen.requests == []


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.2:{port}/hello",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/admin",
        "http://[::ffff:10.0.0.1]/admin",
    ],
)
@pytest.mark.parametrize("status", [302, 307])
async def test_a_redirect_to_a_private_address_is_refused(
    local: FakeContext, server: Server, target: str, status: int
) -> None:
    path = f"/redirect?status={status}&to={target.format(port=server.port)}"
    error = await refused(local, "get", {"url": server.url(path)})
    assert error.code == "E_TOOL_SSRF_BLOCKED"
    assert [seen_path for _, seen_path, _, _ in server.seen.requests] == [path]  # first hop only


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/", "http:///nohost", "notaurl"]
)
async def test_only_http_and_https_urls(ctx: FakeContext, url: str) -> None:
    error = await refused(ctx, "get", {"url": url})
    assert error.code == "E_TOOL_URL_INVALID"


async def test_a_redirect_to_another_scheme_is_refused(local: FakeContext, server: Server) -> None:
    error = await refused(local, "get", {"url": server.url("/redirect?to=file:///etc/passwd")})
    assert error.code == "E_TOOL_URL_INVALID"


async def test_credentials_are_not_forwarded_across_origins(
    ctx: FakeContext, server: Server
) -> None:
    both = replace(ctx, config={"allowHosts": ["127.0.0.1", "localhost"]})
    target = server.url("/echo", host="localhost")
    out = await fetch(
        both,
        "get",
        {"url": server.url(f"/redirect?to={target}"), "headers": {"Authorization": "Bearer x"}},
    )
    assert "Authorization" not in json.loads(out["body"])["headers"]
    first_headers = server.seen.requests[0][2]
    assert first_headers["Authorization"] == "Bearer x"


CUSTOM_CREDENTIALS = {
    "X-Api-Key": "key-for-the-first-origin",
    "Authorization": "Bearer first",
    "Cookie": "session=first",
    "X-Custom-Token": "t0",
}


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_to_another_origin_carries_only_safe_headers(
    local: FakeContext, server: Server, other: Server, status: int
) -> None:
    ctx = replace(local, config={**local.config, "userAgent": "goondan-test"})
    start = server.url(f"/redirect?status={status}&to={other.url('/echo')}")
    headers = {**CUSTOM_CREDENTIALS, "Accept": "application/json", "Accept-Language": "ko"}
    out = await fetch(ctx, "get", {"url": start, "headers": headers})
    assert out["status"] == 200
    first = server.seen.requests[0][2]
    assert first["X-Api-Key"] == "key-for-the-first-origin"  # the origin it was meant for
    [(_, _, got, _)] = other.seen.requests
    lowered = {k.lower(): v for k, v in got.items()}
    for name in CUSTOM_CREDENTIALS:
        assert name.lower() not in lowered, f"{name} leaked to another origin"
    assert lowered["accept"] == "application/json"
    assert lowered["accept-language"] == "ko"
    assert lowered["user-agent"] == "goondan-test"


async def test_a_redirect_within_the_origin_keeps_custom_headers(
    local: FakeContext, server: Server
) -> None:
    out = await fetch(
        local, "get", {"url": server.url("/redirect?to=/echo"), "headers": CUSTOM_CREDENTIALS}
    )
    echoed = json.loads(out["body"])["headers"]
    assert echoed["X-Api-Key"] == "key-for-the-first-origin"
    assert echoed["Authorization"] == "Bearer first"


@pytest.mark.parametrize("status", [307, 308])
async def test_a_body_is_not_re_sent_to_another_origin(
    local: FakeContext, server: Server, other: Server, status: int
) -> None:
    target = other.url("/echo")
    error = await refused(
        local,
        "post",
        {"url": server.url(f"/redirect?status={status}&to={target}"), "body": {"secret": "s"}},
    )
    assert error.code == "E_TOOL_HTTP"
    assert other.seen.requests == []
    same = await fetch(
        local, "post", {"url": server.url(f"/redirect?status={status}&to=/echo"), "body": "b"}
    )
    assert json.loads(same["body"])["body"] == "b"  # within one origin the body goes along
