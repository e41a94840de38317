"""bundles/examples/workspace as its README runs it: validated, `goondan run --input` offline
through a real daemon (bash and file-system tools from @goondan/base), and its webhook
Connection served by a real daemon on a port chosen here (GOONDAN_WEBHOOK_PORT overrides the
bundle's .env)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from protocol.control import StatusQuery
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, free_port, run_cli

BUNDLE = REPO / "bundles" / "examples" / "workspace"
HOOK = "connector:http:webhook"


async def ask(text: str, port: int) -> Any:
    code, out, err = await run_cli(
        "run", str(BUNDLE), "--input", text, env={"GOONDAN_WEBHOOK_PORT": str(port)}
    )
    assert code == 0, err
    return json.loads(out)


async def test_the_example_validates_and_runs_tools_offline() -> None:
    async with asyncio.timeout(120):
        code, out, err = await run_cli("validate", str(BUNDLE))
        assert code == 0, err
        assert "valid" in out + err
        port = free_port()
        ran = await ask("run echo hi", port)
        assert ran["status"] == "ok"
        assert (ran["output"]["stdout"], ran["output"]["exitCode"]) == ("hi\n", 0)
        wrote = await ask("write buy milk", port)
        assert wrote["output"]["path"] == "notes.txt"
        read = await ask("read", port)
        assert "write buy milk" in read["output"]["content"]
        listed = await ask("list", port)
        assert [e["path"] for e in listed["output"]["entries"]] == ["notes.txt"]


SECRET = "example-secret"


def signed(body: bytes) -> dict[str, str]:
    """The headers the example's README tells a client to send."""
    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Goondan-Timestamp": stamp,
        "X-Goondan-Signature": f"sha256={digest}",
    }


async def start_example(start_daemon: StartDaemon, port: int) -> Daemon:
    env = {"GOONDAN_WEBHOOK_PORT": str(port), "GOONDAN_WEBHOOK_SECRET": SECRET}
    daemon = await start_daemon(BUNDLE, swarm="workspace", env=env)
    await daemon.wait_for("transition", process=f"{HOOK}:1", target="idle")
    return daemon


async def test_the_example_webhook_answers_a_post(start_daemon: StartDaemon) -> None:
    port = free_port()
    async with asyncio.timeout(60):
        daemon = await start_example(start_daemon, port)
        body = json.dumps({"text": "run echo from-the-webhook", "instanceKey": "tester"}).encode()
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"http://127.0.0.1:{port}/events"
            answer = await client.post(url, content=body, headers=signed(body))
        assert answer.status_code == 200, answer.text
        result = json.loads(answer.json()["reply"])
        assert result["output"]["stdout"] == "from-the-webhook\n"
        agent = await daemon.process("operator")
        assert agent.instance_key == "tester"


async def test_the_example_routes_a_post_without_instance_key_to_the_swarm_key(
    start_daemon: StartDaemon,
) -> None:
    """`POST /events {"text": "run pwd"}` gave 422 E_CONNECTOR_NO_ROUTE although the rule
    matched; and a body without text ran a turn on empty input."""
    port = free_port()
    async with asyncio.timeout(60):
        daemon = await start_example(start_daemon, port)
        url = f"http://127.0.0.1:{port}/events"
        async with httpx.AsyncClient(timeout=30) as client:
            body = json.dumps({"text": "run echo routed"}).encode()
            answer = await client.post(url, content=body, headers=signed(body))
            empty = json.dumps({"event": "message"}).encode()
            nothing = await client.post(url, content=empty, headers=signed(empty))
        assert answer.status_code == 200, answer.text
        assert json.loads(answer.json()["reply"])["output"]["stdout"] == "routed\n"
        assert (await daemon.process("operator")).instance_key == "workspace"
        assert nothing.status_code == 400
        assert nothing.json()["error"]["code"] == "E_WEBHOOK_BAD_BODY"


async def test_a_web_page_cannot_run_commands_through_the_example(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """A cross-site no-cors POST from a browser ran `id` and wrote a file through this
    example (it had no secret and no Origin, Host or content-type check)."""
    port = free_port()
    # in the victim's workdir: the rest of the file system is read-only in bash's sandbox
    marker = StateLayout.from_env().instance_paths("workspace", "victim", "operator").workdir
    marker /= "pwned"
    command = json.dumps({"text": "run touch pwned", "instanceKey": "victim"}).encode()
    async with asyncio.timeout(60):
        daemon = await start_example(start_daemon, port)
        url = f"http://127.0.0.1:{port}/events"
        async with httpx.AsyncClient(timeout=30) as client:
            page = {"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example"}
            no_cors = await client.post(url, content=command, headers=page)
            unsigned = {"Content-Type": "application/json"}
            as_json = await client.post(url, content=command, headers=unsigned)
            replayed = signed(command)
            first = await client.post(url, content=command, headers=replayed)
            again = await client.post(url, content=command, headers=replayed)
        assert (no_cors.status_code, as_json.status_code) == (403, 401)
        assert (first.status_code, again.status_code) == (200, 409)
        assert marker.exists()  # the signed request ran, once
        agents = [p for p in (await daemon.status()).processes if p.kind == "agent"]
        assert [(p.name, p.instance_key) for p in agents] == [("operator", "victim")]


async def test_a_tool_cannot_drive_the_daemon(start_daemon: StartDaemon) -> None:
    """A tool ran `goondan calls resolve` to approve another instance's pending call, and could
    run `goondan stop`: whatever runs under the daemon is refused, token file or not."""
    port = free_port()
    root = StateLayout.from_env().root
    cli = f"GOONDAN_STATE_ROOT={root} {sys.executable} -m orchestrator"
    async with asyncio.timeout(60):
        daemon = await start_example(start_daemon, port)
        for command in ("stop --swarm workspace", "calls list --swarm workspace"):
            ran = await ask_daemon(daemon, f"run PYTHONPATH={REPO} {cli} {command}")
            out = ran["output"]
            # bash's sandbox hides the state root (no daemon to ask, no call to list), and its
            # per-call /tmp hides a checkout under /tmp (the CLI cannot even start): either
            # way the command fails or sees nothing. The refusal itself, with the token and
            # no sandbox, is test_control_auth's.
            seen = out["stdout"].strip() not in ("", "no pending calls")
            drove = out["exitCode"] == 0 and seen
            assert not drove, json.dumps(out)
        assert (await daemon.status()).orchestrator.pid == daemon.pid  # still running
        forged = await daemon.request(StatusQuery(request_id="x"), token="0" * 64)
        assert not forged.ok and forged.error is not None
        assert forged.error.code == ErrorCode.E_CONTROL_FORBIDDEN


async def ask_daemon(daemon: Daemon, text: str) -> Any:
    reply = await daemon.send(text, key="tool")
    assert reply.ok, reply.error
    assert isinstance(reply.result, dict)
    return json.loads(reply.result["input"])
