"""Deferred (client-side) tool calls through a real daemon and the CLI path (ARCHITECTURE.md §10).

Through the CLI path, `goondan send` (a control SendText with wait) starts a turn whose tool
defers: the reply is the JSON-RPC request (`metadata.deferred`); `goondan calls list --json`
shows the pending call; `goondan calls resolve ID ...` resumes the turn and prints its reply.
The scripted
model answers a tool result with `{last_tool_result}`, so the reply is what the model saw.
Through the webhook connector, the request comes back in the HTTP response and the client's
JSON-RPC answer goes to `POST /rpc` (signed, even on loopback), whose HTTP response is the
resumed turn's reply.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartDaemon
from tests.integration.harness import PYTHON, REPO, Daemon, child_env, free_port, run_cli

BUNDLE = REPO / "tests" / "fixtures" / "deferred"
SWARM = "deferred"


async def start(start_daemon: StartDaemon) -> Daemon:
    return await start_daemon(BUNDLE, swarm=SWARM)


async def defer(daemon: Daemon, text: str, agent: str | None = None) -> dict[str, Any]:
    """Start a turn whose tool defers; return the JSON-RPC request the client got."""
    reply = await daemon.send(text, agent)
    assert reply.ok, reply.error
    request: dict[str, Any] = reply.result["metadata"]["deferred"]
    assert request["jsonrpc"] == "2.0"
    return request


async def calls_list() -> list[dict[str, Any]]:
    code, out, err = await run_cli("calls", "list", "--json")
    assert code == 0, err
    calls: list[dict[str, Any]] = json.loads(out)
    return calls


async def resolve(call_id: str, *answer: str) -> tuple[int, str, str]:
    return await run_cli("calls", "resolve", call_id, *answer)


def tool_result(stdout: str) -> dict[str, Any]:
    """The reply text is the tool result JSON the model saw."""
    result: dict[str, Any] = json.loads(stdout)
    return result


async def test_result_resumes_the_turn_and_the_reply_reaches_the_cli(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await defer(daemon, "confirm deploy?")
        assert request["method"] == "ui.confirm"
        assert request["params"] == {"question": "confirm deploy?"}
        [pending] = await calls_list()
        assert pending["id"] == request["id"]
        assert (pending["agent"], pending["instanceKey"]) == ("alpha", SWARM)
        assert pending["method"] == "ui.confirm"
        assert 3500 < pending["expiresInSeconds"] <= 3600
        code, out, _ = await run_cli("calls", "list")
        assert code == 0 and request["id"] in out and "ui.confirm" in out
        code, out, err = await resolve(request["id"], "--result", '{"confirmed": true}')
        assert code == 0, err
        assert tool_result(out) == {"status": "ok", "output": {"confirmed": True}}
        assert await calls_list() == []


async def test_declared_deferred_export_and_events_queue_behind_it(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await defer(daemon, "calendar please")
        assert (request["method"], request["params"]) == ("calendar.read", {"range": "today"})
        later = asyncio.ensure_future(daemon.send("after the calendar"))
        other = await daemon.send("hello beta", "beta")  # another process keeps serving
        assert other.ok and other.result["input"] == "echo: hello beta"
        assert not later.done()
        code, out, err = await resolve(request["id"], "--result", '{"events": []}')
        assert code == 0, err
        assert tool_result(out)["output"] == {"events": []}
        reply = await later
        assert reply.ok and reply.result["input"] == "echo: after the calendar"


async def test_send_behind_a_pending_call_says_why_it_waits(start_daemon: StartDaemon) -> None:
    """`goondan send` to an instance held by a client-side call prints, on stderr and at
    once, which call it waits for; its reply follows when the call is resolved."""
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await defer(daemon, "confirm deploy?")
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator", "send", "after the call",
            env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        notice = (await proc.stderr.readline()).decode()
        assert request["id"] in notice and "ui.confirm" in notice and "calls list" in notice
        code, _, err = await resolve(request["id"], "--result", '{"confirmed": true}')
        assert code == 0, err
        out, _ = await proc.communicate()
        assert proc.returncode == 0
        assert out.decode().strip() == "echo: after the call"


async def test_run_input_keeps_the_daemon_until_its_pending_call_is_answered() -> None:
    """`goondan run --input` whose turn makes a client-side call says how to answer it, keeps
    the daemon up, and prints the resumed turn's reply once `calls resolve` answers it."""
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "orchestrator", "run", str(BUNDLE), "--input", "confirm deploy?",
        env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(60):
            said = ""
            while "goondan calls resolve" not in said:
                line = (await proc.stderr.readline()).decode()
                assert line, f"run exited: {said}"
                said += line
            call_id = said.split("goondan calls resolve ")[1].split()[0]
            assert f"the turn waits for call {call_id} (ui.confirm" in said
            code, _, err = await resolve(call_id, "--result", '{"confirmed": true}')
            assert code == 0, err
            out, _ = await proc.communicate()
            assert proc.returncode == 0
            assert tool_result(out.decode()) == {"status": "ok", "output": {"confirmed": True}}
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize(
    ("code", "expected", "name"),
    [
        ("-32010", "E_TOOL_PERMISSION_REQUIRED", "PermissionRequired"),
        ("-32001", "E_TOOL_PERMISSION_DENIED", "PermissionDenied"),
        ("-32002", "E_TOOL_USER_CANCELED", "UserCanceled"),
        ("-32099", "E_TOOL_CLIENT_ERROR", "JsonRpcError-32099"),
    ],
)
async def test_client_errors_reach_the_model_as_coded_tool_errors(
    start_daemon: StartDaemon, code: str, expected: str, name: str
) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await defer(daemon, "confirm it")
        answer = ["--error", code, "--message", "nope", "--data", '{"why": "test"}']
        rc, out, err = await resolve(request["id"], *answer)
        assert rc == 0, err
        result = tool_result(out)
        assert result["status"] == "error"
        assert (result["error"]["code"], result["error"]["name"]) == (expected, name)
        assert "nope" in result["error"]["message"] and '"why"' in result["error"]["message"]


async def test_result_not_matching_result_schema_is_a_coded_error(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await defer(daemon, "typed")
        rc, out, err = await resolve(request["id"], "--result", '{"ok": "yes"}')
        assert rc == 0, err
        assert tool_result(out)["error"]["code"] == "E_TOOL_INVALID_RESULT"


async def test_ttl_expiry_fails_the_call(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        mark = daemon.mark()
        request = await defer(daemon, "quick")
        await daemon.wait_for("transition", mark, process="agent:alpha:deferred:1",
                              source="processing", target="idle")  # fmt: skip
        assert await calls_list() == []
        rc, _, err = await resolve(request["id"], "--result", "{}")
        assert rc != 0 and "E_CALL_NOT_FOUND" in err
        reply = await daemon.send("hello again")  # the expired turn ended; the queue moves on
        assert reply.ok and reply.result["input"] == "echo: hello again"


async def test_pending_call_survives_an_agent_restart(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await defer(daemon, "confirm after restart")
        before = (await daemon.process("alpha")).pid
        code, _, err = await run_cli("restart", "--agent", "alpha")
        assert code == 0, err
        [pending] = await calls_list()
        assert pending["id"] == request["id"]
        rc, out, err = await resolve(request["id"], "--result", '"yes"')
        assert rc == 0, err
        assert tool_result(out) == {"status": "ok", "output": "yes"}
        after = await daemon.process("alpha")
        assert after.pid != before and after.generation > 1
        reply = await daemon.send("and then")  # the resumed turn is done: the queue moves on
        assert reply.ok and reply.result["input"] == "echo: and then"


async def test_pending_call_survives_a_daemon_restart(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        first = await start(start_daemon)
        request = await defer(first, "calendar across restarts")
        code, _, err = await run_cli("stop")
        assert code == 0, err
        assert await first.wait() == 0
        await start(start_daemon)  # same state root: the index is rebuilt from disk
        [pending] = await calls_list()
        assert (pending["id"], pending["method"]) == (request["id"], "calendar.read")
        rc, out, err = await resolve(request["id"], "--result", '{"events": ["standup"]}')
        assert rc == 0, err
        assert tool_result(out) == {"status": "ok", "output": {"events": ["standup"]}}
        assert await calls_list() == []


HOOK_SECRET = "integration-hook-secret"
"""The signingSecret (env HOOK_SECRET) of the fixtures' webhook Connections that take /rpc."""


def signed(body: bytes, secret: str = HOOK_SECRET) -> dict[str, str]:
    """The headers of a JSON POST signed as the webhook checks (HMAC of "<time>.<body>")."""
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "X-Goondan-Timestamp": stamp,
            "X-Goondan-Signature": f"sha256={digest}"}  # fmt: skip


async def post(url: str, body: Any, *, sign: bool = True) -> httpx.Response:
    """A JSON POST, signed with HOOK_SECRET (a Connection without a secret does not look)."""
    content = json.dumps(body).encode()
    headers = signed(content) if sign else {"Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, content=content, headers=headers)


async def start_hooked(start_daemon: StartDaemon) -> tuple[str, str]:
    """The daemon of the webhook fixture: the URLs of its Connections `hook` (no secret) and
    `signed` (HOOK_SECRET), once both listen."""
    hook, signed_port = free_port(), free_port()
    env = {"HOOK_PORT": str(hook), "SIGNED_PORT": str(signed_port), "HOOK_SECRET": HOOK_SECRET}
    daemon = await start_daemon(BUNDLE / "webhook", swarm="hooked", env=env)
    for name in ("hook", "signed"):
        await daemon.wait_for("transition", process=f"connector:{name}:webhook:1", target="idle")
    return f"http://127.0.0.1:{hook}", f"http://127.0.0.1:{signed_port}"


async def test_webhook_request_out_answer_in_on_post_rpc(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        _, url = await start_hooked(start_daemon)
        body = {"text": "calendar this week", "properties": {"user": "u1"}}
        # a call is answered through the Connection whose client it went to (issue 27)
        first = await post(url + "/events", body)
        assert first.status_code == 200, first.text
        rpc = first.json()["rpc"]
        assert (rpc["jsonrpc"], rpc["method"]) == ("2.0", "calendar.read")
        assert rpc["params"] == {"range": "calendar this week"}
        [pending] = await calls_list()
        assert (pending["id"], pending["instanceKey"]) == (rpc["id"], "u1")
        answer = {"jsonrpc": "2.0", "id": rpc["id"], "result": {"events": ["standup"]}}
        resumed = await post(url + "/rpc", answer)
        assert resumed.status_code == 200, resumed.text
        reply = json.loads(resumed.json()["reply"])
        assert reply == {"status": "ok", "output": {"events": ["standup"]}}
        # an error answer: the model sees the coded tool error
        again = {"text": "calendar next week", "properties": {"user": "u1"}}  # not a replay
        rpc = (await post(url + "/events", again)).json()["rpc"]
        denied = {"jsonrpc": "2.0", "id": rpc["id"],
                  "error": {"code": -32001, "message": "denied by the user"}}  # fmt: skip
        resumed = await post(url + "/rpc", denied)
        assert json.loads(resumed.json()["reply"])["error"]["code"] == "E_TOOL_PERMISSION_DENIED"
        # a stale id and a malformed answer are refused with a coded error
        stale = await post(url + "/rpc", {"jsonrpc": "2.0", "id": rpc["id"], "result": 1})
        assert (stale.status_code, stale.json()["error"]["code"]) == (404, "E_CALL_NOT_FOUND")
        bad = await post(url + "/rpc", {"jsonrpc": "2.0", "id": "x"})
        assert bad.status_code == 400


async def test_a_call_is_answered_only_through_the_connection_that_received_it(
    start_daemon: StartDaemon,
) -> None:
    """Any connector answered any call by its id: a client of one Connection resolved the
    client-side calls of another's turns (issue 27). Now that is E_CALL_FORBIDDEN, and the
    call still waits for its own client (or an operator)."""
    async with asyncio.timeout(90):
        hook, url = await start_hooked(start_daemon)
        body = {"text": "calendar this week", "properties": {"user": "u3"}}
        rpc = (await post(hook + "/events", body, sign=False)).json()["rpc"]  # via `hook`
        answer = {"jsonrpc": "2.0", "id": rpc["id"], "result": {"events": ["forged"]}}
        refused = await post(url + "/rpc", answer)  # via `signed`: another Connection
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "E_CALL_FORBIDDEN")
        [pending] = await calls_list()
        assert pending["id"] == rpc["id"]
        code, _, err = await run_cli("calls", "resolve", rpc["id"], "--result",
                                       '{"events": ["standup"]}')  # fmt: skip
        assert code == 0, err
        assert await calls_list() == []


async def test_an_unsigned_answer_on_post_rpc_is_refused_even_on_loopback(
    start_daemon: StartDaemon,
) -> None:
    """F5: any local user answered a pending call (a `goondan.approve` too) through a loopback
    webhook without a signingSecret: `POST /rpc` took anyone's answer."""
    async with asyncio.timeout(90):
        hook, url = await start_hooked(start_daemon)
        body = {"text": "calendar this week", "properties": {"user": "u2"}}
        rpc = (await post(url + "/events", body)).json()["rpc"]
        forged = {"jsonrpc": "2.0", "id": rpc["id"], "result": {"events": ["forged"]}}
        for where, sign, status, code in (
            (hook, False, 403, "E_CONNECTOR_UNSIGNED"),
            (hook, True, 403, "E_CONNECTOR_UNSIGNED"),  # a signature it cannot check is none
            (url, False, 401, "E_WEBHOOK_SIGNATURE"),
        ):
            refused = await post(where + "/rpc", forged, sign=sign)
            assert (refused.status_code, refused.json()["error"]["code"]) == (status, code)
            if code == "E_CONNECTOR_UNSIGNED":
                assert "signingSecret" in refused.json()["error"]["message"]
        # nor as an event named like an answer on the unsigned /events
        disguised = {"event": "deferred.answer", "properties": {"rpc": forged}}
        refused = await post(hook + "/events", disguised, sign=False)
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            400, "E_WEBHOOK_BAD_BODY",
        )  # fmt: skip
        [pending] = await calls_list()  # still waiting for its client
        assert pending["id"] == rpc["id"]
        answer = {"jsonrpc": "2.0", "id": rpc["id"], "result": {"events": ["standup"]}}
        content = json.dumps(answer).encode()
        headers = signed(content)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            resumed = await client.post("/rpc", content=content, headers=headers)
            assert resumed.status_code == 200, resumed.text
            assert json.loads(resumed.json()["reply"])["output"] == {"events": ["standup"]}
            replayed = await client.post("/rpc", content=content, headers=headers)
            assert replayed.json()["error"]["code"] == "E_WEBHOOK_REPLAY"
