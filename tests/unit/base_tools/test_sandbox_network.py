"""The sandbox's network allow-list (`_netproxy`, `network: {allow}`): the entry grammar and its
matcher, and `bash` through the real proxy and bubblewrap. Every socket is on 127.0.0.1: the
"allowed" host is a local server listed literally, the "denied" one another local port."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog

from bundles.kinds import network_entry_problem
from bundles.loader import inspect_bundle
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode
from tests.sandboxing import BODY, needs_bubblewrap
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

from .conftest import FakeContext, call, load_tool

bash = load_tool("tools/bash.py")
netproxy = bash._sandbox._netproxy


@pytest.mark.parametrize(
    ("entry", "host", "port", "wildcard"),
    [
        ("api.github.com", "api.github.com", None, False),
        ("*.pypi.org", "pypi.org", None, True),
        ("10.0.0.5:8080", "10.0.0.5", 8080, False),
        ("[::1]:8443", "::1", 8443, False),
        ("Example.COM.", "example.com", None, False),
    ],
)
def test_good_entries(entry: str, host: str, port: int | None, wildcard: bool) -> None:
    rule = netproxy.parse_rule(entry)
    assert (rule.host, rule.port, rule.wildcard) == (host, port, wildcard)


@pytest.mark.parametrize(
    "entry",
    ["", " a.com", "https://a.com", "a.com/x", "a.com:0", "a.com:65536", "a.com:x", "*",
     "*.com", "*.10.0.0.1", "a..com", "-a.com", "a_b.com", "[1.2.3.4]", "[::1", "u@a.com", 5],
)  # fmt: skip
def test_bad_entries(entry: object) -> None:
    with pytest.raises(ValueError):
        netproxy.parse_rule(entry)


def test_bad_entry_is_named_by_its_index() -> None:
    with pytest.raises(ValueError, match=r"allow\[1\] 'bad host'"):
        netproxy.parse_allow(["a.com", "bad host"])


def test_matching() -> None:
    rules = netproxy.parse_allow(["api.github.com", "*.pypi.org", "10.0.0.5:8080"])

    def allowed(host: str, port: int) -> bool:
        return any(rule.matches(netproxy._normal_host(host), port) for rule in rules)

    assert allowed("api.github.com", 443) and allowed("API.github.com.", 80)
    assert not allowed("api.github.com", 22)  # no port listed: 80 and 443 only
    assert allowed("files.pypi.org", 443) and allowed("a.b.pypi.org", 443)
    assert not allowed("pypi.org", 443) and not allowed("evilpypi.org", 443)
    assert allowed("10.0.0.5", 8080) and not allowed("10.0.0.5", 443)
    assert not allowed("github.com", 443)


async def test_a_name_resolving_inside_is_refused_unless_listed_as_the_address() -> None:
    async with asyncio.timeout(10):
        rules = netproxy.parse_allow(["localhost:8080", "127.0.0.1:8081"])
        addresses, refused = await netproxy.destination(rules, "localhost", 8080)
        assert addresses == [] and refused is not None and "loopback" in refused
        assert await netproxy.destination(rules, "127.0.0.1", 8081) == (["127.0.0.1"], None)
        assert (await netproxy.destination(rules, "127.0.0.1", 8080))[1] is not None


def test_plain_requests_go_upstream_in_origin_form() -> None:
    head = b"GET http://a.com:81/x?y=1 HTTP/1.1\r\nHost: a.com\r\nProxy-Connection: k\r\n\r\n"
    request = netproxy.parse_request(head)
    assert (request.host, request.port, request.connect) == ("a.com", 81, False)
    assert request.head == b"GET /x?y=1 HTTP/1.1\r\nHost: a.com\r\nConnection: close\r\n\r\n"
    connect = netproxy.parse_request(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")
    assert (connect.host, connect.port, connect.connect) == ("::1", 8443, True)
    for bad in (b"GET /x HTTP/1.1\r\n\r\n", b"GET ftp://a.com/ HTTP/1.1\r\n\r\n", b"x\r\n\r\n"):
        with pytest.raises(ValueError):
            netproxy.parse_request(bad)


# -- through a real proxy and bubblewrap -------------------------------------------------


def _allowing(ctx: FakeContext, *entries: str, mode: str = "bubblewrap") -> FakeContext:
    box = {"mode": mode, "network": {"allow": list(entries)}}
    return replace(ctx, config={**ctx.config, "sandbox": box})


async def run(ctx: FakeContext, command: str) -> Any:
    async with asyncio.timeout(20):
        return await call(bash, "exec", ctx, {"command": command})


async def test_listed_hosts_go_through_and_others_are_refused(
    ctx: FakeContext, local_servers: tuple[int, int]
) -> None:
    needs_bubblewrap()
    allowed, other = local_servers
    box = _allowing(ctx, f"127.0.0.1:{allowed}", f"localhost:{allowed}")
    url = f"http://127.0.0.1:{allowed}/"
    out = await run(box, f"curl -sS {url}")
    assert (out["exitCode"], out["stdout"]) == (0, BODY), out
    tunnel = await run(box, f"curl -sS --proxytunnel {url}")  # CONNECT, as https does
    assert (tunnel["exitCode"], tunnel["stdout"]) == (0, BODY), tunnel
    py = f"python3 -c \"import urllib.request as u; print(u.urlopen('{url}').read().decode())\""
    assert (await run(box, py))["stdout"] == BODY + "\n"
    with structlog.testing.capture_logs() as logs:
        denied = await run(box, f"curl -s -o /dev/null -w '%{{http_code}}' 127.0.0.1:{other}")
        connect = "curl -s -o /dev/null -w '%{http_connect}' -p"  # the CONNECT's own status
        name = await run(box, f"{connect} localhost:{allowed}")
    assert denied["stdout"] == "403" and name["stdout"] == "403", (denied, name)
    refused = [e for e in logs if e["event"] == "sandbox_network_denied"]
    assert [(e["host"], e["port"], e["tool"]) for e in refused] == [
        ("127.0.0.1", other, "bash"),
        ("localhost", allowed, "bash"),
    ]


async def test_what_ignores_the_proxy_has_no_network(
    ctx: FakeContext, local_servers: tuple[int, int]
) -> None:
    needs_bubblewrap()
    allowed, _ = local_servers
    box = _allowing(ctx, f"127.0.0.1:{allowed}")
    direct = await run(box, f"curl -sS --noproxy '*' http://127.0.0.1:{allowed}/")
    assert direct["exitCode"] != 0 and BODY not in direct["stdout"], direct
    raw = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {allowed}), 3)\""
    assert (await run(box, raw))["exitCode"] != 0
    env = await run(box, "echo $HTTPS_PROXY,$http_proxy,$ALL_PROXY,[$NO_PROXY]")
    url = f"http://127.0.0.1:{netproxy.PORT}"
    assert env["stdout"] == f"{url},{url},{url},[]\n"


async def test_landlock_cannot_filter_hosts_and_refuses(ctx: FakeContext) -> None:
    with pytest.raises(ToolFailed) as caught:
        await run(_allowing(ctx, "api.github.com", mode="landlock"), "true")
    assert caught.value.code == ErrorCode.E_SANDBOX_UNAVAILABLE
    assert "bubblewrap" in str(caught.value)


async def test_a_bad_entry_is_a_coded_refusal(ctx: FakeContext) -> None:
    with pytest.raises(ToolFailed) as caught:
        await run(_allowing(ctx, "http://a.com"), "true")
    assert caught.value.code == ErrorCode.E_TOOL_INVALID_ARGS


async def _connect(path: str, host: str, port: int) -> tuple[Any, Any, bytes]:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
    return reader, writer, await reader.readuntil(b"\r\n\r\n")


async def test_tunnels_are_bounded_and_closed_with_the_call(local_servers: tuple[int, int]) -> None:
    allowed, _ = local_servers
    rules = netproxy.parse_allow([f"127.0.0.1:{allowed}"])
    async with asyncio.timeout(10):
        async with netproxy.serve(rules, log=structlog.get_logger(), tool="t", limit=1) as d:
            path = os.path.join(d, netproxy.SOCKET_NAME)
            reader, writer, head = await _connect(path, "127.0.0.1", allowed)
            assert head.startswith(b"HTTP/1.1 200")
            _, second, busy = await _connect(path, "127.0.0.1", allowed)
            assert busy.startswith(b"HTTP/1.1 503")
            second.close()
        assert not await asyncio.to_thread(os.path.exists, d)
        assert await reader.read() == b""  # the open tunnel ended with the call
        writer.close()


# -- Tool.spec.sandbox.network as a bundle is validated ----------------------------------

TOOL = "kind: Tool\nmetadata: {name: t}\nspec:\n  entry: ./tool.py\n  exports: [{name: run}]\n"


def _errors(tmp_path: Path, sandbox: str) -> list[tuple[ErrorCode, str, str]]:
    doc = VALID_TAIL + "---\napiVersion: goondan.ai/v1\n" + TOOL + f"  sandbox: {sandbox}\n"
    write_bundle(tmp_path, doc)
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    return [(d.code, d.path, d.message) for d in inspect_bundle(tmp_path, packages=[]).errors]


@pytest.mark.parametrize(
    "sandbox",
    ["{network: false}", "{network: true}", "off",
     "{mode: auto, network: {allow: [api.github.com, '*.pypi.org', '10.0.0.5:8080']}}"],
)  # fmt: skip
def test_good_network_settings_load(tmp_path: Path, sandbox: str) -> None:
    assert _errors(tmp_path, sandbox) == []


@pytest.mark.parametrize(
    ("sandbox", "where", "named"),
    [
        ("{network: {allow: [a.com, 'http://b.com']}}", "spec.sandbox.network", "allow[1]"),
        ("{network: {allow: [a.com, 5]}}", "spec.sandbox.network.allow[1]", ""),
        ("{network: {allow: ['a.com:99999']}}", "spec.sandbox.network", "allow[0]"),
        ("{network: {alow: [a.com]}}", "spec.sandbox.network.alow", ""),
        ("{mode: landlock, network: {allow: [a.com]}}", "spec.sandbox", "bubblewrap"),
    ],
)
def test_a_bad_network_setting_is_a_coded_error_at_its_path(
    tmp_path: Path, sandbox: str, where: str, named: str
) -> None:
    [(code, path, message)] = _errors(tmp_path, sandbox)
    assert code == ErrorCode.E_CONFIG_SCHEMA_INVALID
    assert path.endswith(" " + where), path
    assert named in message


ENTRIES = [
    "api.github.com", "*.pypi.org", "10.0.0.5:8080", "[::1]:8443", "::1", "Example.COM.",
    "", " a.com", "https://a.com", "a.com/x", "a.com:0", "a.com:65536", "a.com:x", "*",
    "*.com", "*.10.0.0.1", "a..com", "-a.com", "a_b.com", "[1.2.3.4]", "[::1", "u@a.com",
    "1.2.3", "[::1]x", "a.com:80:1",
]  # fmt: skip


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_bundle_and_the_proxy_read_the_same_entries(entry: str) -> None:
    try:
        netproxy.parse_rule(entry)
        proxy_takes = True
    except ValueError:
        proxy_takes = False
    assert (network_entry_problem(entry) is None) == proxy_takes


async def test_what_is_no_proxy_request_gets_400_and_no_connection() -> None:
    async with asyncio.timeout(10):
        async with netproxy.serve((), log=structlog.get_logger(), tool="t") as d:
            reader, writer = await asyncio.open_unix_connection(
                os.path.join(d, netproxy.SOCKET_NAME)
            )
            writer.write(b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 400")
            writer.close()
