"""Findings F6 and F7 of the second security pass, performed against a real daemon the way
they were found (tests/fixtures/api_limits): the `api` connector's edge.

- F6: an `Idempotency-Key` was shared by every client of a Connection (client B got client
  A's reply), and an OpenAI `user` named any instance of the swarm, also one the CLI made.
- F7: the body of a request was read before its token was checked (unauthenticated 1 MiB
  posts grew the connector's memory), and idle sockets held the connection limit, so an
  authorized request got 503.

Each test fails without its fix."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from pathlib import Path

import httpx
import openai
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import TaskNotFoundError

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon
from tests.integration.test_connectors import free_port

BUNDLE = REPO / "tests" / "fixtures" / "api_limits"
TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
MIB = 1024 * 1024


async def _start(start_daemon: StartDaemon) -> tuple[Daemon, str, str]:
    """The daemon, and the URLs of its Connections `api` and `shared`."""
    api, shared = free_port(), free_port()
    env = {"API_PORT": str(api), "SHARED_PORT": str(shared), "API_TOKEN": TOKEN_A,
           "API_TOKEN_B": TOKEN_B}  # fmt: skip
    daemon = await start_daemon(BUNDLE, swarm="limits", env=env)
    for name in ("connector:api:api:1", "connector:shared:api:1"):
        await daemon.wait_for("transition", process=name, target="idle")
    return daemon, f"http://127.0.0.1:{api}", f"http://127.0.0.1:{shared}"


def _client(url: str, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=30)


def _history(key: str) -> list[str]:
    path = StateLayout.from_env().instance_paths("limits", key, "front").base_jsonl
    return [json.loads(line).get("content") or "" for line in path.read_text().splitlines()]


def _owned(connection: str, token: str, name: str) -> str:
    """The instance key of `name` for one token (the README's `api:<Connection>:<token id>:`)."""
    return f"api:{connection}:{hashlib.sha256(token.encode()).hexdigest()[:12]}:{name}"


async def _say(
    client: openai.AsyncOpenAI, text: str, user: str, key: str | None = None, **headers: str
) -> str:
    if key:
        headers["Idempotency-Key"] = key
    done = await client.chat.completions.create(
        model="front", user=user, messages=[{"role": "user", "content": text}],
        extra_headers=headers,
    )  # fmt: skip
    return done.choices[0].message.content or ""


async def test_an_api_client_reaches_only_its_own_replies_and_instances(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        daemon, url, shared_url = await _start(start_daemon)
        a, b = _client(url, TOKEN_A), _client(url, TOKEN_B)
        first = await _say(a, "from a", "u", key="k-1")
        other = await _say(b, "from b", "u", key="k-1")  # A's key, B's token
        again = await _say(a, "from a, resent", "u", key="k-1")
        # an instance the operator made: an OpenAI `user` of that name does not reach it
        made = await daemon.send("operator's secret", "front", key="ops")
        assert made.ok, made.error
        await _say(a, "let me in", "ops")
        await _say(b, "me too", "ops")
        # the header that names the token to the protocols is the gate's, not the client's
        forged = hashlib.sha256(TOKEN_A.encode()).hexdigest()[:12]
        await _say(b, "as a", "u", **{"X-Goondan-Api-Client": forged})
        # sharedInstances: both tokens talk to one instance of the Connection
        sa, sb = _client(shared_url, TOKEN_A), _client(shared_url, TOKEN_B)
        await _say(sa, "one", "team")
        await _say(sb, "two", "team")
        for client in (a, b, sa, sb):
            await client.close()
    assert (first, other, again) == ("echo: from a", "echo: from b", "echo: from a")
    assert _history(_owned("api", TOKEN_A, "u")) == ["from a", "echo: from a"]
    assert _history(_owned("api", TOKEN_B, "u"))[:2] == ["from b", "echo: from b"]
    assert _history(_owned("api", TOKEN_B, "u"))[2:] == ["as a", "echo: as a"]
    assert _history("ops") == ["operator's secret", "echo: operator's secret"]
    assert _history(_owned("api", TOKEN_A, "ops")) == ["let me in", "echo: let me in"]
    assert _history("api:shared:team") == ["one", "echo: one", "two", "echo: two"]


def _peak_rss(pid: int) -> int:
    """The most memory a process has held (VmHWM), bytes: what the bodies took at once, which
    VmRSS after the fact does not show (a 1 MiB buffer goes back to the system when freed)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


async def _head_only(url: str, headers: str, path: str = "/v1/chat/completions") -> bytes:
    """The answer to a request head announcing a 1 MiB body that never comes."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {MIB}\r\n"
                      f"{headers}\r\n").encode())  # fmt: skip
        async with asyncio.timeout(3):  # the body's own deadline is 10 s
            return await reader.read(4096)
    finally:
        writer.close()
        await writer.wait_closed()


async def _parked(url: str, count: int) -> list[asyncio.StreamWriter]:
    """`count` unauthenticated posts, each sent but for the last byte of its 1 MiB body: a
    server that reads bodies before tokens holds them all at once."""
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer no\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MIB}\r\n\r\n"
    ).encode()

    async def post() -> asyncio.StreamWriter:
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + b"x" * (MIB - 1))
        with contextlib.suppress(ConnectionError):  # refused and discarded: the server may close
            await writer.drain()
        return writer

    return await asyncio.gather(*(post() for _ in range(count)))


async def test_an_unauthenticated_request_is_refused_before_its_body_is_read(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(120):
        daemon, url, _ = await _start(start_daemon)
        answer = await _head_only(url, "Authorization: Bearer wrong\r\n")
        open_path = await _head_only(url, "", "/healthz")  # open to GET only
        pid = int((await daemon.wait_for("spawned", process="connector:api:api:1"))["pid"])
        before = _peak_rss(pid)
        parked = await _parked(url, 90)  # under maxConnectionsPerClient
        held = _peak_rss(pid) - before
        for writer in parked:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for w in parked), return_exceptions=True)
        body = b'{"model": "front", "messages": [], "pad": "' + b"x" * (MIB - 64) + b'"}'
        limits = httpx.Limits(max_connections=100)  # maxConnectionsPerClient
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            headers = {"Authorization": "Bearer wrong", "Content-Type": "application/json"}
            posts = [client.post("/v1/chat/completions", content=body, headers=headers)
                     for _ in range(300)]  # fmt: skip
            answers = await asyncio.gather(*posts)
            health = await client.get("/healthz")  # still open, to GET
        grown = _peak_rss(pid) - before

    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert b'"E_API_UNAUTHORIZED"' in answer
    assert open_path.startswith(b"HTTP/1.1 401 "), open_path
    assert (health.status_code, health.json()) == (200, {"ok": True})

    assert {r.status_code for r in answers} == {401}
    assert {r.json()["error"]["code"] for r in answers} == {"E_API_UNAUTHORIZED"}
    # bodies read before the token: 90 MiB held at once; refused on the head: none
    assert held < 16 * MIB, f"90 parked posts took {held / MIB:.0f} MiB"
    assert grown < 40 * MIB, f"300 posts took {grown / MIB:.0f} MiB at the peak"


async def test_idle_sockets_do_not_lock_out_a_client_and_a_client_over_its_rate_waits(
    start_daemon: StartDaemon,
) -> None:
    """200 idle sockets (the finding used 1,000; 200 pass the Connection's maxConnections of
    150 just as well, faster), then an authorized request; then a token over its rate."""
    async with asyncio.timeout(90):
        _, url, shared_url = await _start(start_daemon)
        host, port = url.removeprefix("http://").split(":")
        idle = [await asyncio.open_connection(host, int(port)) for _ in range(200)]
        sdk = _client(url, TOKEN_A)
        try:
            reply = await _say(sdk, "still served", "u")
        finally:
            await sdk.close()
            for _, writer in idle:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in idle), return_exceptions=True)
        async with httpx.AsyncClient(base_url=shared_url, timeout=30) as client:
            ask = {"model": "front", "messages": [{"role": "user", "content": "hi"}]}
            auth_a = {"Authorization": f"Bearer {TOKEN_A}"}
            auth_b = {"Authorization": f"Bearer {TOKEN_B}"}
            allowed = [await client.post("/v1/chat/completions", json=ask, headers=auth_a)
                       for _ in range(3)]  # fmt: skip
            over = await client.post("/v1/chat/completions", json=ask, headers=auth_a)
            other = await client.post("/v1/chat/completions", json=ask, headers=auth_b)
    assert reply == "echo: still served"
    assert [r.status_code for r in allowed] == [200, 200, 200]
    assert over.status_code == 429, over.text
    assert over.json()["error"]["code"] == "E_API_RATE_LIMITED"
    assert 1 <= int(over.headers["retry-after"]) <= 20
    assert other.status_code == 200  # the limit is per token


async def test_an_a2a_client_does_not_see_another_tokens_task(
    start_daemon: StartDaemon,
) -> None:
    """A2A tasks were one store for every token: a client with another token read a task's
    reply by its id (GetTask), or continued it."""
    async with asyncio.timeout(60):
        _, url, _ = await _start(start_daemon)
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN_A}"}) as http_a,
            httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN_B}"}) as http_b,
        ):
            card = await A2ACardResolver(http_a, f"{url}/a2a/front").get_agent_card()
            a = await create_client(card, ClientConfig(httpx_client=http_a, streaming=False))
            b = await create_client(card, ClientConfig(httpx_client=http_b, streaming=False))
            said = Message(role=Role.ROLE_USER, message_id="m-a", parts=[Part(text="mine")])
            async for response in a.send_message(SendMessageRequest(message=said)):
                task = response.task
            own = await a.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await b.get_task(GetTaskRequest(id=task.id))
            again = Message(role=Role.ROLE_USER, message_id="m-b", parts=[Part(text="ours")],
                            task_id=task.id, context_id=task.context_id)  # fmt: skip
            with pytest.raises(TaskNotFoundError):
                async for _ in b.send_message(SendMessageRequest(message=again)):
                    pass
    assert [p.text for art in own.artifacts for p in art.parts] == ["echo: mine"]


async def test_an_mcp_session_is_used_only_with_the_token_that_opened_it(
    start_daemon: StartDaemon,
) -> None:
    """An MCP session id was good with any token: a client that learned one used the session
    (or ended it) as the client that opened it."""
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "attack", "version": "1"}}}  # fmt: skip
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with asyncio.timeout(60):
        _, url, _ = await _start(start_daemon)
        as_a = {**accept, "Authorization": f"Bearer {TOKEN_A}"}
        as_b = {**accept, "Authorization": f"Bearer {TOKEN_B}"}
        async with (
            httpx.AsyncClient(base_url=url, headers=as_a, timeout=30) as a,
            httpx.AsyncClient(base_url=url, headers=as_b, timeout=30) as b,
        ):
            opened = await a.post("/mcp", json=hello)
            session = {"mcp-session-id": opened.headers["mcp-session-id"]}
            await a.post("/mcp", json=ready, headers=session)
            stolen = await b.post("/mcp", json=tools, headers=session)
            ended = await b.delete("/mcp", headers=session)
            own = await a.post("/mcp", json=tools, headers=session)
    assert opened.status_code == 200
    assert (stolen.status_code, ended.status_code) == (404, 404)
    assert own.status_code == 200 and "ask_front" in own.text
