"""A deferred call answered just before the orchestrator is SIGKILLed still resumes its turn.

`calls resolve` records the answer in the daemon's answer book, then hands it to the agent
process. If the daemon dies in between (here: the agent is frozen with SIGSTOP, so it cannot
take the frame, and the daemon is SIGKILLed), the answer is on disk but no process resumes
the turn.
The next daemon must start that instance so the turn finishes with the stored answer,
without waiting for an unrelated event to wake the instance up.
(Found by the chaos suite's orchestrator-kill scenario; issue 9.)
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import psutil

from protocol.control import CallsResolve
from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli

BUNDLE = REPO / "tests" / "fixtures" / "deferred"
SWARM = "deferred"
ALPHA = "agent:alpha:deferred"
STANDUP = {"events": ["standup"]}


async def calls_list() -> list[dict[str, Any]]:
    code, out, err = await run_cli("calls", "list", "--json")
    assert code == 0, err
    calls: list[dict[str, Any]] = json.loads(out)
    return calls


def conversation() -> list[dict[str, Any]]:
    base = StateLayout.from_env().instance_paths(SWARM, SWARM, "alpha").base_jsonl
    if not base.exists():
        return []
    return [json.loads(line) for line in base.read_bytes().splitlines()]


async def answered_but_daemon_killed(daemon: Daemon) -> str:
    """A pending call whose answer is stored, and a daemon SIGKILLed before the agent took it."""
    reply = await daemon.send("calendar across a crash")
    assert reply.ok, reply.error
    call_id: str = reply.result["metadata"]["deferred"]["id"]
    alpha = psutil.Process((await daemon.process("alpha")).pid)
    alpha.suspend()  # SIGSTOP: the poke waits in its socket
    mark = daemon.mark()
    req = CallsResolve(request_id="r", call_id=call_id, result=STANDUP)
    resolving = asyncio.ensure_future(daemon.request(req, limit=60))
    await daemon.wait_for("deferred_call_resolved", mark, call_id=call_id)
    daemon.signal(signal.SIGKILL)
    await daemon.wait()
    resolving.cancel()
    await asyncio.gather(resolving, return_exceptions=True)
    # PDEATHSIG kills the stopped child too (psutil polls the exit of a process not ours)
    await asyncio.to_thread(alpha.wait, 10)
    return call_id


async def test_answered_call_resumes_after_an_orchestrator_sigkill(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        first = await start_daemon(BUNDLE, swarm=SWARM)
        call_id = await answered_but_daemon_killed(first)
        assert [m for m in conversation() if m.get("toolCallId") == call_id] == []
        again = await start_daemon(BUNDLE, swarm=SWARM)
        # no event is sent: the daemon itself brings the instance up to finish the turn
        async with asyncio.timeout(20):
            await again.wait_for("transition", process=f"{ALPHA}:1", source="processing",
                                 target="idle")  # fmt: skip
        results = [m for m in conversation() if m.get("toolCallId") == call_id]
        assert len(results) == 1, conversation()
        assert json.loads(results[0]["content"]) == {"status": "ok", "output": STANDUP}
        assert await calls_list() == []
        pending = StateLayout.from_env().instance_paths(SWARM, SWARM, "alpha").pending_calls_dir
        assert list(pending.glob("*")) == []  # the call's files went with its resumed turn
        reply = await again.send("and then")  # the queue moves on
        assert reply.ok and reply.result["input"] == "echo: and then"
