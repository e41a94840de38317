"""SIGKILL the orchestrator under load, restart it: conversations and pending deferred calls
resume, and nothing is duplicated.

Before the kill, three turns of the worker wait for their client (the deferred tool
`client__ask`): two started by a control client (`goondan send`'s path), one by a webhook
client. After the restart, `goondan calls list` shows exactly those three; the control ones
are answered with `goondan calls resolve` (which prints the resumed turn's reply), the
webhook one with `POST /rpc` to the new connector (whose response is the reply). Each call's
tool result and reply are in its conversation exactly once, and a second answer is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import httpx

from protocol.control import CallsResolve, ControlReply
from protocol.endpoints import StateLayout
from tests.chaos import checks
from tests.chaos.deferred import asked
from tests.chaos.load import Control, run_load
from tests.chaos.test_chaos import RPC_SECRET, SWARM, start_chaos
from tests.integration.conftest import StartDaemon
from tests.integration.harness import Daemon, run_cli
from tests.integration.test_deferred import signed

DEFERRED_KEYS = ["d0", "d1", "d2"]
"""Instances whose turn waits for a client: d0, d1 from the control path, d2 from the webhook."""
FROZEN = "d3"
"""An instance whose call is answered while its process is stopped (SIGSTOP), just before the
orchestrator dies: the answer is on disk, no process took it; the next daemon resumes it."""


async def test_orchestrator_sigkill_under_load_then_restart_resumes(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(150):
        daemon, _, rpc_url = await start_chaos(start_daemon)
        first = await daemon.send("req before", "caller", key="k0")
        assert first.ok, first.error
        before = await history(daemon)
        assert before > 0
        pending = await defer_three(daemon, rpc_url)
        frozen = await answer_frozen(daemon)
        await sigkill_under_load(daemon)
        frozen.cancel()  # its client died with the daemon
        await asyncio.gather(frozen, return_exceptions=True)
        again, _, rpc_url = await start_chaos(start_daemon)
        async with asyncio.timeout(30):  # no event for it: the daemon resumes it by itself
            await again.wait_for("transition", process=f"agent:worker:{FROZEN}:1",
                                 source="processing", target="idle")  # fmt: skip
        after = await history(again)
        listed = await calls_list()
        print(f"\nrestart: history before kill {before}, after restart {after}; "
              f"pending before kill {sorted(pending.values())}, listed after restart "
              f"{sorted(c['id'] for c in listed)}")  # fmt: skip
        assert after > before  # the new process replayed the old conversation
        assert sorted(c["id"] for c in listed) == sorted(pending.values())
        await resolve_all(pending, rpc_url)
        assert await calls_list() == []
        for call_id in pending.values():  # answered once: a second answer finds nothing
            code, _, err = await run_cli("calls", "resolve", call_id, "--result", '"again"')
            assert code != 0 and "E_CALL_NOT_FOUND" in err, err
        reply = await again.send("req after restart", "caller", key="k0")
        assert reply.ok, reply.error
        for key, call_id in pending.items():
            assert_answered_once(key, call_id)
        assert_answered_once(FROZEN, frozen_id(), answer={"answer": FROZEN})
        print("restart: 4 deferred calls resumed exactly once (2 by `goondan calls resolve`, "
              "1 by webhook POST /rpc, 1 answered before the kill and resumed by the daemon), "
              "0 duplicated messages, 0 calls left")  # fmt: skip
        assert not await asyncio.to_thread(checks.conversation_faults, SWARM)


async def defer_three(daemon: Daemon, url: str) -> dict[str, str]:
    """Start the three waiting turns; {instance key: pending call id}. The webhook one comes
    through `answers` (`url`), the Connection that may answer it: a call is answered only
    through the Connection that received it."""
    pending = {}
    for key in DEFERRED_KEYS[:2]:
        reply = await daemon.send(f"ask {key}", "worker", key=key)
        assert reply.ok, reply.error
        rpc = reply.result["metadata"]["deferred"]
        assert (rpc["method"], rpc["params"]) == ("chaos.ask", {"question": f"ask {key}"})
        pending[key] = rpc["id"]
    key = DEFERRED_KEYS[2]
    body = {"text": f"ask {key}", "properties": {"key": key}}
    response = await post_signed(f"{url}/events", json.dumps(body).encode())
    assert response.status_code == 200, response.text
    pending[key] = response.json()["rpc"]["id"]
    assert sorted(c["id"] for c in await calls_list()) == sorted(pending.values())
    return pending


async def answer_frozen(daemon: Daemon) -> asyncio.Future[ControlReply]:
    """A call of FROZEN answered while its process is stopped: the answer is stored, the
    poke waits in the stopped process's socket. Returns the waiting resolve request."""
    reply = await daemon.send(f"ask {FROZEN}", "worker", key=FROZEN)
    assert reply.ok, reply.error
    call_id = reply.result["metadata"]["deferred"]["id"]
    status = await daemon.status()
    [pid] = [p.pid for p in status.processes if (p.name, p.instance_key) == ("worker", FROZEN)]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    mark = daemon.mark()
    req = CallsResolve(request_id="frozen", call_id=call_id, result={"answer": FROZEN})
    resolving = asyncio.ensure_future(daemon.request(req, limit=120))
    await daemon.wait_for("deferred_call_resolved", mark, call_id=call_id)
    return resolving


def frozen_id() -> str:
    [call] = [m for m in conversation(FROZEN) if m.get("toolCalls")]
    call_id: str = call["toolCalls"][0]["id"]
    return call_id


async def sigkill_under_load(daemon: Daemon) -> None:
    """Load on k0, SIGKILL the orchestrator mid-turn; every process of the run is gone."""
    control = Control(SWARM)
    load = asyncio.ensure_future(run_load(control, ["k0"], 3600, 3600, clients=2))
    await daemon.wait_for("transition", daemon.mark(), target="processing")
    procs = daemon.descendants()
    daemon.signal(signal.SIGKILL)
    await daemon.wait()
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)
    control.close()
    # children die with the daemon (PDEATHSIG): nothing of the first run is left
    left = await checks.wait_gone(procs, StateLayout.from_env().root, 10)
    assert not left, left


async def resolve_all(pending: dict[str, str], url: str) -> None:
    """Answer each call on its own path; the resumed turn's reply carries the answer."""
    for key in DEFERRED_KEYS[:2]:
        answer = json.dumps({"answer": key})
        code, out, err = await run_cli("calls", "resolve", pending[key], "--result", answer)
        assert code == 0, err
        assert out.strip() == asked({"answer": key}), out
    key = DEFERRED_KEYS[2]
    rpc = json.dumps({"jsonrpc": "2.0", "id": pending[key], "result": {"answer": key}})
    response = await post_signed(f"{url}/rpc", rpc.encode())
    assert response.status_code == 200, response.text
    assert response.json()["reply"] == asked({"answer": key})


def assert_answered_once(key: str, call_id: str, answer: Any = None) -> None:
    """The instance's conversation: one tool call, one tool result, one reply for the call."""
    messages = conversation(key)
    calls = [m for m in messages if call_id in json.dumps(m.get("toolCalls") or [])]
    results = [m for m in messages if m.get("toolCallId") == call_id]
    replies = [m["content"] for m in messages if str(m.get("content", "")).startswith("asked:")]
    assert (len(calls), len(results), len(replies)) == (1, 1, 1), messages
    assert replies == [asked({"answer": key} if answer is None else answer)]


def conversation(key: str) -> list[dict[str, Any]]:
    base = StateLayout.from_env().instance_paths(SWARM, key, "worker").base_jsonl
    return [json.loads(line) for line in base.read_bytes().splitlines()]


async def history(daemon: Daemon) -> int:
    reply = await daemon.send("history", "caller", key="k0")
    assert reply.ok and isinstance(reply.result, dict), reply.error
    text = str(reply.result["input"])
    assert text.startswith("history "), text
    return int(text.split()[1])


async def calls_list() -> list[dict[str, Any]]:
    code, out, err = await run_cli("calls", "list", "--json", "--swarm", SWARM)
    assert code == 0, err
    calls: list[dict[str, Any]] = json.loads(out)
    return calls


async def post_signed(url: str, content: bytes) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, content=content, headers=signed(content, RPC_SECRET))
