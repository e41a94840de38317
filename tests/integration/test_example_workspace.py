"""bundles/examples/workspace as its README runs it: validated, `goondan run --input` offline
through a real daemon (bash and file-system tools from @goondan/base), and its webhook
Connection served by a real daemon on a port chosen here (GOONDAN_WEBHOOK_PORT overrides the
bundle's .env)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx

from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, run_cli

BUNDLE = REPO / "bundles" / "examples" / "workspace"
HOOK = "connector:http:webhook"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


async def test_the_example_webhook_answers_a_post(start_daemon: StartDaemon) -> None:
    port = free_port()
    async with asyncio.timeout(60):
        daemon = await start_daemon(
            BUNDLE, swarm="workspace", env={"GOONDAN_WEBHOOK_PORT": str(port)}
        )
        await daemon.wait_for("transition", process=f"{HOOK}:1", target="idle")
        body = {"text": "run echo from-the-webhook", "instanceKey": "tester"}
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.post(f"http://127.0.0.1:{port}/events", json=body)
        assert answer.status_code == 200, answer.text
        result = json.loads(answer.json()["reply"])
        assert result["output"]["stdout"] == "from-the-webhook\n"
        agent = await daemon.process("operator")
        assert agent.instance_key == "tester"
