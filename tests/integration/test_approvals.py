"""Approvals through a real daemon (ARCHITECTURE.md §10): a Tool export with `approval:` runs
only after a person says so.

The scripted agent calls `payments__transfer` (approval when amount >= 100), `payments__wipe`
(always), `payments__quick` (approval with a 1 s TTL) and, after a tool, answers with the tool
result it saw, so the reply is what the model got. Every tool run appends a line to `ran.log`
in the instance's workdir: the tests see whether the handler ran, and how often.
"""

from __future__ import annotations

import asyncio
import getpass
import json
from pathlib import Path
from typing import Any

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli
from tests.integration.test_deferred import HOOK_SECRET, calls_list, defer, free_port, post

BUNDLE = REPO / "tests" / "fixtures" / "approvals"
SWARM = "approvals"


async def start(start_daemon: StartDaemon, port: int | None = None) -> Daemon:
    env = {"HOOK_PORT": str(port or free_port()), "HOOK_SECRET": HOOK_SECRET}
    return await start_daemon(BUNDLE, swarm=SWARM, env=env)


def instance_dir(key: str = SWARM) -> Path:
    return StateLayout.from_env().instance_paths(SWARM, key, "teller").root


def ran(key: str = SWARM) -> list[str]:
    path = instance_dir(key) / "workdir" / "ran.log"
    return path.read_text().splitlines() if path.exists() else []


def approval_events(key: str = SWARM) -> list[dict[str, Any]]:
    path = instance_dir(key) / "messages" / "runtime-events.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in lines if e["type"] == "tool.approval"]


async def ask(daemon: Daemon, text: str) -> dict[str, Any]:
    """Start a turn whose tool needs approval; the JSON-RPC request the client got."""
    request = await defer(daemon, text)
    assert request["method"] == "goondan.approve"
    return request


async def test_approve_runs_the_tool_and_the_turn_resumes(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await ask(daemon, "pay big")
        assert request["params"] == {
            "tool": "payments__transfer",
            "arguments": {"amount": 500, "to": "bob"},
            "message": "Send money?",
        }
        [pending] = await calls_list()
        assert (pending["id"], pending["method"]) == (request["id"], "goondan.approve")
        assert ran() == []  # nothing runs before the decision
        code, out, err = await run_cli("calls", "approve", request["id"])
        assert code == 0, err
        assert json.loads(out) == {"status": "ok", "output": {"sent": 500, "to": "bob"}}
        assert ran() == ["transfer 500 bob"]
        [event] = approval_events()
        assert event["toolName"] == "payments__transfer"
        assert event["data"]["decision"] == "approved"
        assert (event["data"]["by"], event["data"]["via"]) == (getpass.getuser(), "cli")
        assert abs(event["data"]["at"] - event["at"]) < 30
        assert await calls_list() == []


async def test_arguments_outside_when_run_without_asking(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        reply = await daemon.send("pay small")
        assert reply.ok, reply.error
        assert json.loads(reply.result["input"])["output"] == {"sent": 5, "to": "bob"}
        assert "deferred" not in reply.result.get("metadata", {})
        assert ran() == ["transfer 5 bob"]


async def test_deny_gives_the_model_permission_denied(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await ask(daemon, "wipe")
        code, out, err = await run_cli("calls", "deny", request["id"], "--message", "not today")
        assert code == 0, err
        result = json.loads(out)
        assert result["status"] == "error"
        assert result["error"]["code"] == "E_TOOL_PERMISSION_DENIED"
        assert "not today" in result["error"]["message"]
        assert ran() == []
        [event] = approval_events()
        assert event["data"]["decision"] == "denied"
        assert event["data"]["message"] == "not today"


async def test_expired_approval_never_runs_the_tool(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        mark = daemon.mark()
        request = await ask(daemon, "quick")
        await daemon.wait_for("transition", mark, process=f"agent:teller:{SWARM}:1",
                              source="processing", target="idle")  # fmt: skip
        code, _, err = await run_cli("calls", "approve", request["id"])
        assert code != 0 and "E_CALL_NOT_FOUND" in err
        assert ran() == []
        [event] = approval_events()
        assert (event["data"]["decision"], event["data"]["error"]) == (
            "expired",
            "E_TOOL_DEFERRED_EXPIRED",
        )


async def test_approval_survives_a_daemon_restart(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        first = await start(start_daemon)
        request = await ask(first, "pay big")
        code, _, err = await run_cli("stop")
        assert code == 0, err
        assert await first.wait() == 0
        await start(start_daemon)
        [pending] = await calls_list()
        assert (pending["id"], pending["method"]) == (request["id"], "goondan.approve")
        code, out, err = await run_cli("calls", "approve", request["id"])
        assert code == 0, err
        assert json.loads(out)["output"] == {"sent": 500, "to": "bob"}
        assert ran() == ["transfer 500 bob"]  # once, by the process that resumed the turn
        assert [e["data"]["decision"] for e in approval_events()] == ["approved"]


async def test_approve_refuses_a_call_that_is_not_an_approval(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        reply = await daemon.send("ask")
        request = reply.result["metadata"]["deferred"]
        assert request["method"] == "ui.ask"
        code, _, err = await run_cli("calls", "approve", request["id"])
        assert code == 1 and "E_CALL_NOT_APPROVAL" in err
        code, _, err = await run_cli("calls", "deny", "no-such-call")
        assert code == 1 and "E_CALL_NOT_FOUND" in err


async def test_a_webhook_client_cannot_approve_on_post_rpc(start_daemon: StartDaemon) -> None:
    """`POST /rpc` took `{"approved": true, "by": "ann"}` and recorded `by: ann`: whoever held
    the hook's secret decided approvals, under any name (issue 27 F1). A webhook is no
    approver: E_CALL_FORBIDDEN, the tool does not run, and the CLI still can."""
    async with asyncio.timeout(60):
        port = free_port()
        daemon = await start(start_daemon, port)
        await daemon.wait_for("transition", process="connector:hook:webhook:1", target="idle")
        url = f"http://127.0.0.1:{port}"
        first = await post(url + "/events", {"text": "pay big", "properties": {"user": "ann"}})
        rpc = first.json()["rpc"]
        assert rpc["method"] == "goondan.approve"
        answer = {"jsonrpc": "2.0", "id": rpc["id"], "result": {"approved": True, "by": "ann"}}
        refused = await post(url + "/rpc", answer)
        assert refused.json()["error"]["code"] == "E_CALL_FORBIDDEN", refused.text
        assert ran("ann") == [] and approval_events("ann") == []
        assert [row["id"] for row in await calls_list()] == [rpc["id"]]
        code, _, err = await run_cli("calls", "approve", rpc["id"])
        assert code == 0, err
        await daemon.wait_for("resumed_reply_to_origin", call_id=rpc["id"])  # the turn ended
        assert ran("ann") == ["transfer 500 bob"]
        [event] = approval_events("ann")
        assert (event["data"]["by"], event["data"]["via"]) == (getpass.getuser(), "cli")


async def test_a_turn_waiting_for_its_approval_shows_waiting_with_the_call(
    start_daemon: StartDaemon,
) -> None:
    """Not `processing` for as long as nobody decides: `waiting (call ID)`, and idle again
    once the turn resumed and ended."""
    async with asyncio.timeout(60):
        daemon = await start(start_daemon)
        request = await ask(daemon, "pay big")
        teller = await daemon.process("teller")
        assert (teller.status, teller.calls) == ("waiting", [request["id"]])
        code, out, err = await run_cli("status", "--swarm", SWARM)
        assert code == 0, err  # waiting is not a failure
        assert f"waiting (call {request['id']})" in out
        code, _, err = await run_cli("calls", "approve", request["id"])
        assert code == 0, err
        teller = await daemon.process("teller")
        assert teller.status in ("idle", "processing") and teller.calls == []
